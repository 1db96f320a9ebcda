package ckpt

import (
	"errors"
	"math/big"
	"strings"
)

// pyTarNumber reads a tar number field as Python's tarfile.nti does:
// base-256 when the first byte is 0o200 or 0o377, else the field up to
// its first NUL, ASCII, as int(s.strip() or "0", 8), which accepts
// surrounding whitespace, a sign, a "0o" prefix and underscores between
// digits.
func pyTarNumber(f []byte) (int64, error) {
	if len(f) > 0 && (f[0] == 0o200 || f[0] == 0o377) {
		n := new(big.Int)
		for _, c := range f[1:] {
			n.Lsh(n, 8).Or(n, big.NewInt(int64(c)))
		}
		if f[0] == 0o377 {
			n.Sub(n, new(big.Int).Lsh(big.NewInt(1), uint(8*(len(f)-1))))
		}
		if !n.IsInt64() {
			return 0, errors.New("base-256 number out of range")
		}
		return n.Int64(), nil
	}
	s := string(trimNul(f))
	for _, c := range []byte(s) {
		if c >= 0x80 {
			return 0, errors.New("number field is not ASCII")
		}
	}
	s = strings.Trim(s, " \t\n\r\v\f\x1c\x1d\x1e\x1f")
	if s == "" {
		return 0, nil
	}
	neg := false
	switch s[0] {
	case '-':
		neg = true
		s = s[1:]
	case '+':
		s = s[1:]
	}
	if len(s) > 2 && s[0] == '0' && (s[1] == 'o' || s[1] == 'O') {
		s = s[2:]
		if s[0] == '_' {
			s = s[1:] // int("0o_7", 8) is 7
		}
	}
	if s == "" || s[0] == '_' || s[len(s)-1] == '_' || strings.Contains(s, "__") {
		return 0, errors.New("bad number field")
	}
	var n int64
	for _, c := range []byte(s) {
		if c == '_' {
			continue
		}
		if c < '0' || c > '7' {
			return 0, errors.New("bad number field")
		}
		if n > (1<<62)/8 {
			return 0, errors.New("number field out of range")
		}
		n = n*8 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, nil
}

// tarDataBlocks is how many bytes of data follow a member's header as
// tarfile walks the archive: only regular files (and types it does not
// know) have data blocks; directories, devices, FIFOs and links have none,
// whatever their size field says, and an old-style regular file ('\0')
// whose name ends in "/" is a directory.
func tarDataBlocks(typ byte, name string, size int64) int64 {
	if typ == 0 && strings.HasSuffix(name, "/") {
		return 0
	}
	switch typ {
	case '1', '2', '3', '4', '5', '6':
		return 0
	}
	return (size + 511) / 512 * 512
}
