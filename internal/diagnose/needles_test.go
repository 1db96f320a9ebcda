package diagnose

import (
	"math/rand"
	"strings"
	"testing"
)

// TestNeedleSet checks the one-pass filter against strings.Contains: bit k
// of a line's mask is set exactly when the line holds one of signature k's
// needles, on real lines and on random text built from the needles' bytes.
func TestNeedleSet(t *testing.T) {
	ns, always := signatureNeedles()
	want := func(s string) uint64 {
		m := always
		for k, sig := range lineSigs {
			for _, n := range sig.needles {
				if strings.Contains(s, n) {
					m |= 1 << k
				}
			}
		}
		return m
	}
	lines := benchTail(64 << 10)
	var alphabet []byte
	for _, sig := range lineSigs {
		for _, n := range sig.needles {
			alphabet = append(alphabet, n...)
			lines = append(lines, n, "x"+n+"y", n[:len(n)-1], strings.ToLower(n))
		}
	}
	rng := rand.New(rand.NewSource(1))
	for range 20000 {
		b := make([]byte, rng.Intn(40))
		for i := range b {
			b[i] = alphabet[rng.Intn(len(alphabet))]
		}
		lines = append(lines, string(b))
	}
	for _, l := range lines {
		if got, w := ns.scan(l)|always, want(l); got != w {
			t.Fatalf("%q: mask %b, want %b", l, got, w)
		}
	}
}
