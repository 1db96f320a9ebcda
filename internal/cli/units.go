package cli

import (
	"fmt"
	"strconv"
	"strings"
)

// parseBytes reads sizes the way docker's --memory does: a number with an
// optional unit b, k, m, g, t (powers of 1024; "KiB", "MB" and friends are
// accepted too, decimal for the SI forms).
func parseBytes(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("invalid size %q: want a number with an optional unit (e.g. 512m, 2g, 1.5GiB)", s)
	}
	mult := map[string]float64{
		"": 1, "b": 1,
		"k": 1 << 10, "kb": 1e3, "kib": 1 << 10,
		"m": 1 << 20, "mb": 1e6, "mib": 1 << 20,
		"g": 1 << 30, "gb": 1e9, "gib": 1 << 30,
		"t": 1 << 40, "tb": 1e12, "tib": 1 << 40,
	}
	m, ok := mult[unit]
	if !ok {
		return 0, fmt.Errorf("invalid size %q: unknown unit %q (use b, k, m, g or t)", s, unit)
	}
	return uint64(f * m), nil
}
