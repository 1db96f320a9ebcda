package ckpt

import "math"

// Sizes read from a pickle are attacker-chosen int64s: every product and
// sum of them is checked, so a count that wraps (2**62+4 float32 elements
// are 2**64+16 bytes, 16 once wrapped) is never taken for a small one.

// mulSize is a*b for non-negative a and b, ok false on overflow.
func mulSize(a, b int64) (int64, bool) {
	if a < 0 || b < 0 {
		return 0, false
	}
	if a != 0 && b > math.MaxInt64/a {
		return 0, false
	}
	return a * b, true
}

// addSize is a+b for non-negative a and b, ok false on overflow.
func addSize(a, b int64) (int64, bool) {
	if a < 0 || b < 0 || a > math.MaxInt64-b {
		return 0, false
	}
	return a + b, true
}

// shapeNumel is the element count of shape, ok false for a negative
// dimension or an overflow.
func shapeNumel(shape []int64) (int64, bool) {
	n := int64(1)
	for _, s := range shape {
		var ok bool
		if n, ok = mulSize(n, s); !ok {
			return 0, false
		}
	}
	return n, true
}
