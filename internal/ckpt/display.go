package ckpt

import (
	"strconv"
	"unicode"
	"unicode/utf8"
)

// DisplayPath is a file name as it is safe to print on a terminal or in a
// line-oriented listing: unchanged when it holds only printable characters,
// else Go-quoted ("ckpt\n1.pt" with the newline as \n, escape sequences as
// \x1b), so a name cannot move the cursor, retitle the terminal or pass
// for two lines. --json output keeps the exact name.
func DisplayPath(p string) string {
	if !utf8.ValidString(p) {
		return strconv.Quote(p)
	}
	for _, r := range p {
		if !unicode.IsPrint(r) && r != ' ' {
			return strconv.Quote(p)
		}
	}
	return p
}
