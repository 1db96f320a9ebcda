package pickle

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestDecodeValues(t *testing.T) {
	tests := []struct {
		name, in string
		want     string // fmt of the decoded value
	}{
		{"proto2 dict", "\x80\x02}q\x00X\x04\x00\x00\x00stepq\x01K\x05s.", "{step: 5}"},
		{"proto0 dict", "(dp0\nS'a'\np1\nI01\ns.", "{a: True}"},
		{"proto0 int and long", "(I42\nL123456789012345678901234567890L\ntp0\n.", "[42 123456789012345678901234567890]"},
		{"binfloat", "\x80\x02G?\xf0\x00\x00\x00\x00\x00\x00.", "1"},
		{"text float", "F0.25\n.", "0.25"},
		{"long1 negative", "\x80\x02\x8a\x01\xff.", "-1"},
		{"tuple ops", "\x80\x02K\x01K\x02K\x03\x87.", "[1 2 3]"},
		{"unicode escape", "Vcaf\\u00e9\np0\n.", "café"},
		{"frozenset", "\x80\x04(K\x01K\x02\x91.", "&{[1 2] true}"},
		{"none true false", "\x80\x02N\x88\x89\x87.", "[{} true false]"},
		{"list self-cycle", "\x80\x02]q\x00h\x00a.", "cycle"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := DecodeBytes([]byte(tc.in), DefaultLimits)
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "cycle" {
				l := res.Value.(*List)
				if len(l.Items) != 1 || l.Items[0] != any(l) {
					t.Fatalf("want a list holding itself, got %v", l.Items)
				}
				return
			}
			got := fmt.Sprint(res.Value)
			if got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
			if res.End != int64(len(tc.in)) {
				t.Errorf("End = %d, want %d", res.End, len(tc.in))
			}
		})
	}
}

func TestDecodeCalls(t *testing.T) {
	// os.system("id") through REDUCE: recorded, never run.
	res, err := DecodeBytes([]byte("cos\nsystem\n(S'id'\ntR."), DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	c, ok := res.Value.(*Call)
	if !ok {
		t.Fatalf("value is %T", res.Value)
	}
	if g, _ := c.Global(); g.String() != "os.system" || fmt.Sprint(c.Args) != "[id]" {
		t.Errorf("call = %v%v", c.Func, c.Args)
	}
	if len(res.Globals) != 1 || !res.Globals[0].Resolved || res.Globals[0].Opcode != "GLOBAL" {
		t.Errorf("globals = %+v", res.Globals)
	}
	// STACK_GLOBAL with non-string operands is unresolved.
	res, _ = DecodeBytes([]byte("\x80\x04K\x01K\x02\x93."), DefaultLimits)
	if len(res.Globals) != 1 || res.Globals[0].Resolved {
		t.Errorf("globals = %+v", res.Globals)
	}
}

func TestDecodeErrorsAndLimits(t *testing.T) {
	small := Limits{MaxBytes: 1 << 20, MaxOps: 1000, MaxMemo: 10, MaxStack: 100, MaxMarks: 5, MaxDepth: 20, MaxString: 64}
	deep := "\x80\x02" + strings.Repeat("]", 30) + strings.Repeat("a", 29) + "."
	tuples := "\x80\x02K\x01" + strings.Repeat("\x85", 30) + "."
	memo := "\x80\x02" + func() string {
		var b strings.Builder
		for i := 0; i < 20; i++ {
			b.WriteString("K\x01q" + string(rune(i)) + "0")
		}
		return b.String()
	}() + "N."
	tests := []struct {
		name, in string
		limit    bool // the error must come from a limit
		contains string
	}{
		{"empty", "", false, "truncated"},
		{"no stop", "\x80\x02K\x01", false, "truncated"},
		{"unknown opcode", "\x80\x02\xff.", false, "unknown opcode"},
		{"bad protocol", "\x80\x09.", false, "protocol"},
		{"underflow", "\x80\x02a.", false, "underflow"},
		{"missing memo", "\x80\x02h\x05.", false, "memo 5 read before"},
		{"ops", "\x80\x02" + strings.Repeat("N0", 600) + "N.", true, "opcodes"},
		{"stack", "\x80\x02" + strings.Repeat("N", 200) + ".", true, "stack"},
		{"marks", "\x80\x02" + strings.Repeat("(", 10) + ".", true, "marks"},
		{"depth lists", deep, true, "nesting"},
		{"depth tuples", tuples, true, "nesting"},
		{"memo", memo, true, "memo"},
		{"string", "\x80\x03X\x00\x01\x00\x00" + strings.Repeat("a", 256) + ".", true, "string"},
		{"huge length", "\x80\x04\x8d\xff\xff\xff\xff\xff\xff\xff\x7f.", true, "string"},
		{"frame past end", "\x80\x04\x95\xff\x00\x00\x00\x00\x00\x00\x00.", false, "frame"},
		{"text garbage", "hello world\n", false, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := DecodeBytes([]byte(tc.in), small)
			if err == nil {
				t.Fatalf("decoded %v, want an error", res.Value)
			}
			if res == nil {
				t.Fatal("nil result with error")
			}
			if tc.limit != errors.Is(err, ErrLimit) {
				t.Errorf("errors.Is(ErrLimit) = %v for %v", !tc.limit, err)
			}
			if !strings.Contains(err.Error(), tc.contains) {
				t.Errorf("error %q does not mention %q", err, tc.contains)
			}
		})
	}
}

// TestManySetitemsLinear: 200k distinct keys decode (the old linear key
// search made this quadratic and hung the fuzzer).
func TestManySetitemsLinear(t *testing.T) {
	var b bytes.Buffer
	b.WriteString("\x80\x02}(")
	for i := 0; i < 200_000; i++ {
		b.WriteString("J")
		b.Write([]byte{byte(i), byte(i >> 8), byte(i >> 16), 0})
		b.WriteString("N")
	}
	b.WriteString("u.")
	res, err := DecodeBytes(b.Bytes(), DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	if n := res.Value.(*Dict).Len(); n != 200_000 {
		t.Fatalf("%d keys", n)
	}
}
