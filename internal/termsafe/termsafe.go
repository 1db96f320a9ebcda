// Package termsafe makes text from jobs safe to print on a terminal: the
// bytes a job wrote to its log (escape sequences that retitle the window,
// clear the screen, rewrite the clipboard or hide text) are shown, never
// obeyed. Control characters other than newline and tab become visible
// escapes (\x1b, \u009b), and so do bytes that are not UTF-8.
package termsafe

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// String returns s with every control character except '\n' and '\t' (C0,
// DEL and C1) and every byte that is not UTF-8 replaced by a visible escape.
func String(s string) string {
	if clean(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n' || r == '\t':
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r >= 0x80 && r < 0xa0:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// Line is String for text that must stay on one line (a table cell, a
// name in a sentence): newline and tab become visible escapes too, so a
// name cannot begin a row of its own or shift the columns after it.
func Line(s string) string {
	s = String(s)
	if !strings.ContainsAny(s, "\n\t") {
		return s
	}
	return strings.NewReplacer("\n", `\n`, "\t", `\t`).Replace(s)
}

// clean reports whether s needs no change.
func clean(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x80 {
			return utf8.ValidString(s[i:]) && !hasC1(s[i:])
		}
		if (c < 0x20 && c != '\n' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

func hasC1(s string) bool {
	for _, r := range s {
		if (r >= 0x80 && r < 0xa0) || r < 0x20 && r != '\n' && r != '\t' || r == 0x7f {
			return true
		}
	}
	return false
}

// Writer returns a writer that passes what it is given through String to w.
// Each Write is sanitized on its own, so a caller writes whole strings (as
// fmt.Fprintf does); the count returned is that of the bytes given.
func Writer(w io.Writer) io.Writer { return writer{w} }

type writer struct{ w io.Writer }

func (s writer) Write(p []byte) (int, error) {
	if _, err := io.WriteString(s.w, String(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}
