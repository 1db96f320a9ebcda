// Package units writes byte counts for people and reads the sizes people
// write. Commands write byte counts with FormatBytes so that "1.5 GiB" reads
// the same in doctor, explain, runs, kernels, top and ckpt. It only formats
// and parses; it never prints.
package units

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Number is any type a byte count or a byte rate is kept in.
type Number interface {
	~int | ~int8 | ~int16 | ~int32 | ~int64 |
		~uint | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~uintptr |
		~float32 | ~float64
}

// suffixes are the binary (IEC) units, one per power of 1024.
var suffixes = [...]string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}

// FormatBytes writes n for people in binary units with about three
// significant digits: "0 B", "1023 B", "1 KiB", "1.5 GiB", "97.7 MiB",
// "504 GiB". A whole value drops its ".0"; a value that rounds to 1024 of a
// unit is written as 1 of the next ("1 MiB", never "1024 KiB"). Negative
// values keep their sign ("-2 MiB", for rates); NaN is "?" and infinities
// are "∞" and "-∞".
func FormatBytes[N Number](n N) string {
	return format(float64(n), false)
}

// FormatBytesFixed writes n as FormatBytes does, but always with one
// decimal from 1 KiB up ("1.0 GiB", "512.0 MiB", "97.7 MiB"). For output
// that redraws in place (top's tables, a progress line): the digits keep
// their places as a value grows, where FormatBytes would go from "1.9 GiB"
// to "2 GiB".
func FormatBytesFixed[N Number](n N) string {
	return format(float64(n), true)
}

func format(v float64, fixed bool) string {
	switch {
	case math.IsNaN(v):
		return "?"
	case math.IsInf(v, 1):
		return "∞"
	case math.IsInf(v, -1):
		return "-∞"
	}
	sign := ""
	if v < 0 {
		sign, v = "-", -v
	}
	s := magnitude(v, fixed)
	if s == "0 B" {
		return s // no "-0 B" for a rate of -0.2 B/s
	}
	return sign + s
}

// magnitude formats v >= 0.
func magnitude(v float64, fixed bool) string {
	if r := math.Round(v); r < 1024 {
		return strconv.FormatFloat(r, 'f', 0, 64) + " B"
	}
	e := 0
	for v >= 1024 && e < len(suffixes)-1 {
		v /= 1024
		e++
	}
	r := roundFor(v, fixed)
	if r >= 1024 && e < len(suffixes)-1 {
		// 1023.97 KiB is 1 MiB, not "1024 KiB"
		v /= 1024
		e++
		r = roundFor(v, fixed)
	}
	if fixed {
		return strconv.FormatFloat(r, 'f', 1, 64) + " " + suffixes[e]
	}
	return strconv.FormatFloat(r, 'f', -1, 64) + " " + suffixes[e]
}

// roundFor rounds v >= 0 half up: to one decimal below 100 (always in
// fixed form), to a whole number from 100 on.
func roundFor(v float64, fixed bool) float64 {
	if fixed || v < 100 {
		return math.Round(v*10) / 10
	}
	return math.Round(v)
}

// multipliers are the units ParseBytes accepts, lower-cased.
var multipliers = map[string]float64{
	"": 1, "b": 1,
	"k": 1 << 10, "kb": 1e3, "kib": 1 << 10,
	"m": 1 << 20, "mb": 1e6, "mib": 1 << 20,
	"g": 1 << 30, "gb": 1e9, "gib": 1 << 30,
	"t": 1 << 40, "tb": 1e12, "tib": 1 << 40,
}

// ParseBytes reads a size the way docker's --memory and tmpfs's size=
// option do: a number with an optional unit b, k, m, g or t in any case,
// powers of 1024 ("512m", "2g", "65536k"). "KiB", "MiB", ... are binary as
// well, "KB", "MB", ... decimal. A fraction is allowed ("1.5g"); what it
// leaves below one byte is dropped. Whatever FormatBytes writes for a
// finite, non-negative value below 1024 TiB reads back to within its
// rounding.
func ParseBytes(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("invalid size %q: want a number with an optional unit (e.g. 512m, 2g, 1.5GiB)", s)
	}
	m, ok := multipliers[unit]
	if !ok {
		return 0, fmt.Errorf("invalid size %q: unknown unit %q (use b, k, m, g or t)", s, unit)
	}
	v := f * m
	if v >= 1<<64 {
		return 0, fmt.Errorf("invalid size %q: more than 16 EiB", s)
	}
	return uint64(v), nil
}
