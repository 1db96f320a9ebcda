package termsafe

import (
	"bytes"
	"fmt"
	"testing"
)

func TestString(t *testing.T) {
	for in, want := range map[string]string{
		"plain text\n\twith tab": "plain text\n\twith tab",
		"héllo — ünïcode ▁▂█":    "héllo — ünïcode ▁▂█",
		"\x1b]0;title\x07red":    `\x1b]0;title\x07red`,
		"\x1b[2J\x1b[31mx":       `\x1b[2J\x1b[31mx`,
		"a\rb\x08c\x7f":          `a\x0db\x08c\x7f`,
		"c1 \u009b31m":           `c1 \u009b31m`,
		"bad \xff\xfe utf8":      `bad \xff\xfe utf8`,
		"":                       "",
		"ok é then \x1b":         `ok é then \x1b`,
	} {
		if got := String(in); got != want {
			t.Errorf("String(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestWriter(t *testing.T) {
	var b bytes.Buffer
	w := Writer(&b)
	n, err := fmt.Fprintf(w, "x %s\n", "\x1b[2J")
	if err != nil || n != len("x \x1b[2J\n") || b.String() != "x \\x1b[2J\n" {
		t.Errorf("n %d err %v out %q", n, err, b.String())
	}
}

// Line keeps a name on its line: newline and tab are escaped as well as
// every control character String escapes.
func TestLine(t *testing.T) {
	tests := []struct{ in, want string }{
		{"train.py", "train.py"},
		{"a\tb", `a\tb`},
		{"nb\nroot 1 fake", `nb\nroot 1 fake`},
		{"\x1b]0;pwned\x07x", `\x1b]0;pwned\x07x`},
		{"\u009b31m", `\u009b31m`},
		{"ünïcode", "ünïcode"},
	}
	for _, tt := range tests {
		if got := Line(tt.in); got != tt.want {
			t.Errorf("Line(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
