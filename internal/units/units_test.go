package units

import (
	"math"
	"strings"
	"testing"
)

const (
	kib = 1 << 10
	mib = 1 << 20
	gib = 1 << 30
	tib = 1 << 40
)

// byteText is a size and the text a formatter gives it.
type byteText struct {
	in   float64
	want string
}

// checkFormat checks that format, called name, gives each case its text.
func checkFormat(t *testing.T, name string, format func(float64) string, cases []byteText) {
	t.Helper()
	for _, c := range cases {
		if got := format(c.in); got != c.want {
			t.Errorf("%s(%v) = %q, want %q", name, c.in, got, c.want)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	checkFormat(t, "FormatBytes", FormatBytes[float64], []byteText{
		{0, "0 B"},
		{1, "1 B"},
		{1023, "1023 B"},
		{1023.4, "1023 B"},
		{1023.5, "1 KiB"}, // rounds to 1024 B: one unit up
		{kib, "1 KiB"},
		{1536, "1.5 KiB"},
		{kib * 1.25, "1.3 KiB"},  // half up, not to even
		{kib * 1.249, "1.2 KiB"}, // not a half
		{kib * 9.96, "10 KiB"},
		{kib * 99.94, "99.9 KiB"},
		{kib * 99.96, "100 KiB"},
		{kib * 100.4, "100 KiB"},
		{kib * 1023.4, "1023 KiB"},
		{kib * 1023.6, "1 MiB"}, // never "1024 KiB"
		{mib - 1, "1 MiB"},
		{mib, "1 MiB"},
		{64 * mib, "64 MiB"},
		{64*mib + 10*kib, "64 MiB"}, // 64.0098: whole after rounding, no ".0"
		{97.66 * mib, "97.7 MiB"},
		{gib - 1, "1 GiB"},
		{gib, "1 GiB"},
		{1.5 * gib, "1.5 GiB"},
		{79.15 * gib, "79.2 GiB"},
		{504 * gib, "504 GiB"},
		{tib - 1, "1 TiB"},
		{tib, "1 TiB"},
		{2.25 * tib, "2.3 TiB"},
		{1 << 50, "1 PiB"},
		{1 << 60, "1 EiB"},
		{1 << 70, "1024 EiB"}, // no unit past EiB
		{-0.3, "0 B"},         // no "-0 B"
		{-512, "-512 B"},
		{-1.5 * mib, "-1.5 MiB"},
		{0.4, "0 B"},
		{math.NaN(), "?"},
		{math.Inf(1), "∞"},
		{math.Inf(-1), "-∞"},
	})
}

func TestFormatBytesIntegerTypes(t *testing.T) {
	tests := []struct {
		name, got, want string
	}{
		{"uint64 max", FormatBytes(uint64(math.MaxUint64)), "16 EiB"},
		{"uint64", FormatBytes(uint64(3 * gib)), "3 GiB"},
		{"int64 negative", FormatBytes(int64(-2 * mib)), "-2 MiB"},
		{"int64 min", FormatBytes(int64(math.MinInt64)), "-8 EiB"},
		{"int", FormatBytes(20 * mib), "20 MiB"},
		{"uint32", FormatBytes(uint32(4095)), "4 KiB"},
		{"float32", FormatBytes(float32(1.5 * gib)), "1.5 GiB"},
		{"named type", FormatBytes(myBytes(kib)), "1 KiB"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, tt.got, tt.want)
		}
	}
}

type myBytes uint64

func TestFormatBytesFixed(t *testing.T) {
	checkFormat(t, "FormatBytesFixed", FormatBytesFixed[float64], []byteText{
		{0, "0 B"},
		{1023, "1023 B"},
		{kib, "1.0 KiB"},
		{1.9 * gib, "1.9 GiB"},
		{2 * gib, "2.0 GiB"},
		{512 * mib, "512.0 MiB"},
		{97.66 * mib, "97.7 MiB"},
		{1023.94 * mib, "1023.9 MiB"},
		{1023.96 * mib, "1.0 GiB"},
		{4 * gib, "4.0 GiB"},
		{-1.25 * gib, "-1.3 GiB"},
		{math.NaN(), "?"},
	})
}

func TestParseBytes(t *testing.T) {
	tests := []struct {
		in   string
		want uint64
	}{
		{"0", 0},
		{"1024", 1024},
		{"512b", 512},
		{"65536k", 64 * mib}, // tmpfs size= as mountinfo shows it
		{"64m", 64 * mib},
		{"64M", 64 * mib},
		{"2g", 2 * gib},
		{"1t", tib},
		{"1.5g", 1.5 * gib},
		{"1.5GiB", 1.5 * gib},
		{"1.5 GiB", 1.5 * gib}, // as FormatBytes writes it
		{"  100m ", 100 * mib},
		{"2GB", 2e9},
		{"10kb", 10e3},
		{"0.5b", 0}, // below a byte is dropped
		{"16383t", 16383 * tib},
	}
	for _, tt := range tests {
		got, err := ParseBytes(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
}

func TestParseBytesErrors(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"", "want a number"},
		{"k", "want a number"},
		{"-1g", "want a number"},
		{".", "want a number"},
		{"1.2.3m", "want a number"},
		{"12x3", `unknown unit "x3"`},
		{"1e9", `unknown unit "e9"`},
		{"5 mebibytes", `unknown unit "mebibytes"`},
		{"2p", `unknown unit "p"`},
		{"20000000t", "more than 16 EiB"},
	}
	for _, tt := range tests {
		got, err := ParseBytes(tt.in)
		if err == nil {
			t.Errorf("ParseBytes(%q) = %d, want an error", tt.in, got)
			continue
		}
		if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), `"`+tt.in+`"`) {
			t.Errorf("ParseBytes(%q): error %q should name the input and say %q", tt.in, err, tt.want)
		}
	}
}

// TestRoundTrip: what FormatBytes writes, ParseBytes reads back to within
// the rounding of three significant digits.
func TestRoundTrip(t *testing.T) {
	for _, v := range []float64{0, 1, 999, 1023, 1024, 1500, 10 * kib, 123456, 64 * mib, 1.15 * gib, 79.15 * gib, 504 * gib, 3.3 * tib, 1000 * tib} {
		s := FormatBytes(v)
		got, err := ParseBytes(s)
		if err != nil {
			t.Errorf("ParseBytes(FormatBytes(%v) = %q): %v", v, s, err)
			continue
		}
		if d := math.Abs(float64(got) - v); d > 0.05*v+1 {
			t.Errorf("ParseBytes(FormatBytes(%v) = %q) = %d, off by %.0f", v, s, got, d)
		}
	}
}
