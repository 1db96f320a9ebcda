package pickle

import (
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The text operands of protocol 0 opcodes are read the way CPython's C
// unpickler (Modules/_pickle.c, the one pickle.load and torch.load use)
// reads them, so that the decoder never stops where Python goes on and
// never reads a different string than Python does:
//
//   - INT: C strtol with base 0 (leading whitespace, sign, 0x hex, C octal
//     "010" = 8) up to the newline or a NUL byte; else Python's int(s, 0)
//     (0x/0o/0b prefixes, underscores, surrounding whitespace).
//   - LONG: a trailing L is dropped, then int(s, 0).
//   - GET/PUT keys: int(s, 10) (whitespace, sign, underscores); the line is
//     a C string, so it ends at the first NUL byte.
//   - FLOAT: PyOS_string_to_double: no whitespace, inf/nan words, ends at
//     the newline or a NUL byte.
//   - STRING: the quoted body decoded by codecs.escape_decode (\\ \' \" \a
//     \b \f \n \r \t \v, up to three octal digits, \xHH; any other escape
//     keeps its backslash).
//   - UNICODE: raw-unicode-escape (\u and 4 hex digits, \U and 8; other bytes are
//     Latin-1 code points; lone surrogates allowed).
//   - BINUNICODE: UTF-8 with surrogatepass.
//   - GLOBAL: both lines strict UTF-8; INST: both lines ASCII.

// maxDecimalDigits is CPython's default int_max_str_digits: longer decimal
// integers are refused by int().
const maxDecimalDigits = 4300

// cstr cuts s at its first NUL byte, as C string functions see it.
func cstr(s string) string {
	if i := strings.IndexByte(s, 0); i >= 0 {
		return s[:i]
	}
	return s
}

func isCSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

// LargeInt stands for an integer too long to be worth converting (more
// than maxDecimalDigits digits or 64 KiB of LONG1/LONG4 bytes).
type LargeInt struct{ Digits int }

// parseIntOperand reads the operand of INT (line without its newline).
func parseIntOperand(line string) (any, error) {
	if len(line) == 0 {
		return nil, errors.New("INT operand is empty")
	}
	s := cstr(line)
	// strtol(s, &end, 0)
	i := 0
	for i < len(s) && isCSpace(s[i]) {
		i++
	}
	neg := false
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		neg = s[i] == '-'
		i++
	}
	base := 10
	if i+1 < len(s) && s[i] == '0' && (s[i+1] == 'x' || s[i+1] == 'X') && i+2 < len(s) && hexDigit(s[i+2]) >= 0 {
		base = 16
		i += 2
	} else if i < len(s) && s[i] == '0' {
		base = 8
	}
	j := i
	for j < len(s) && digitIn(s[j], base) {
		j++
	}
	if j > i && j == len(s) {
		if v, err := strconv.ParseInt(s[i:j], base, 64); err == nil {
			if neg {
				v = -v
			}
			if len(line) == 2 && (v == 0 || v == 1) {
				return v == 1, nil
			}
			return v, nil
		}
	}
	v, err := pyInt(s, 0)
	if err != nil {
		return nil, fmt.Errorf("bad INT operand %q: %v", truncate(line), err)
	}
	return v, nil
}

// parseLongOperand reads the operand of LONG.
func parseLongOperand(line string) (any, error) {
	if len(line) == 0 {
		return nil, errors.New("LONG operand is empty")
	}
	if line[len(line)-1] == 'L' {
		line = line[:len(line)-1]
	}
	v, err := pyInt(cstr(line), 0)
	if err != nil {
		return nil, fmt.Errorf("bad LONG operand %q: %v", truncate(line), err)
	}
	return v, nil
}

// parseMemoKey reads the operand of GET or PUT: int(s, 10).
func parseMemoKey(line string) (uint64, error) {
	if len(line) == 0 {
		return 0, errors.New("memo key is empty")
	}
	v, err := pyInt(cstr(line), 10)
	if err != nil {
		return 0, fmt.Errorf("bad memo key %q: %v", truncate(line), err)
	}
	switch x := v.(type) {
	case int64:
		if x < 0 {
			return 0, fmt.Errorf("negative memo key %d", x)
		}
		return uint64(x), nil
	}
	return 0, fmt.Errorf("memo key %q out of range", truncate(line))
}

func hexDigit(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

func digitIn(c byte, base int) bool {
	d := hexDigit(c)
	return d >= 0 && d < base
}

// pyInt is PyLong_FromString(s, NULL, base) for base 0 or 10: surrounding
// whitespace, a sign, (base 0) a 0x/0o/0b prefix, digits with single
// underscores between them.
func pyInt(s string, base int) (any, error) {
	i, e := 0, len(s)
	for i < e && isCSpace(s[i]) {
		i++
	}
	for e > i && isCSpace(s[e-1]) {
		e--
	}
	s = s[i:e]
	neg := false
	if s != "" && (s[0] == '+' || s[0] == '-') {
		neg = s[0] == '-'
		s = s[1:]
	}
	prefixed := false
	if base == 0 {
		base = 10
		if len(s) >= 2 && s[0] == '0' {
			switch s[1] {
			case 'x', 'X':
				base, prefixed = 16, true
			case 'o', 'O':
				base, prefixed = 8, true
			case 'b', 'B':
				base, prefixed = 2, true
			}
		}
		if prefixed {
			s = s[2:]
			// an underscore may follow the prefix
			if s != "" && s[0] == '_' {
				s = s[1:]
				if s == "" || s[0] == '_' {
					return nil, errors.New("invalid literal")
				}
			}
		} else if len(s) > 1 && s[0] == '0' {
			// base 0: a decimal with a leading zero must be all zeros
			for k := 0; k < len(s); k++ {
				if s[k] != '0' && s[k] != '_' {
					return nil, errors.New("invalid literal (leading zeros)")
				}
			}
		}
	}
	if s == "" {
		return nil, errors.New("invalid literal")
	}
	var digits strings.Builder
	prevUnderscore := true // no leading underscore
	for k := 0; k < len(s); k++ {
		c := s[k]
		if c == '_' {
			if prevUnderscore {
				return nil, errors.New("invalid literal")
			}
			prevUnderscore = true
			continue
		}
		if !digitIn(c, base) {
			return nil, errors.New("invalid literal")
		}
		prevUnderscore = false
		digits.WriteByte(c)
	}
	if prevUnderscore {
		return nil, errors.New("invalid literal")
	}
	ds := digits.String()
	if base == 10 && len(ds) > maxDecimalDigits {
		return nil, fmt.Errorf("exceeds the limit (%d digits)", maxDecimalDigits)
	}
	if len(ds) > maxDecimalDigits {
		return LargeInt{Digits: len(ds)}, nil
	}
	if v, err := strconv.ParseInt(ds, base, 64); err == nil {
		if neg {
			v = -v
		}
		return v, nil
	}
	b, ok := new(big.Int).SetString(ds, base)
	if !ok {
		return nil, errors.New("invalid literal")
	}
	if neg {
		b.Neg(b)
	}
	if b.IsInt64() {
		return b.Int64(), nil
	}
	return BigInt{b}, nil
}

// parseFloatOperand reads the operand of FLOAT.
func parseFloatOperand(line string) (float64, error) {
	s := cstr(line)
	bad := fmt.Errorf("bad FLOAT operand %q", truncate(line))
	if s == "" {
		return 0, bad
	}
	body := s
	if body[0] == '+' || body[0] == '-' {
		body = body[1:]
	}
	switch strings.ToLower(body) {
	case "inf", "infinity", "nan":
		v, err := strconv.ParseFloat(strings.TrimPrefix(s, "+"), 64)
		if err != nil {
			if strings.EqualFold(body, "nan") {
				return strconv.ParseFloat("NaN", 64)
			}
			return 0, bad
		}
		return v, nil
	}
	// digits [. digits] [e sign digits]; at least one digit in the mantissa
	k, mant := 0, 0
	for k < len(body) && body[k] >= '0' && body[k] <= '9' {
		k++
		mant++
	}
	if k < len(body) && body[k] == '.' {
		k++
		for k < len(body) && body[k] >= '0' && body[k] <= '9' {
			k++
			mant++
		}
	}
	if mant == 0 {
		return 0, bad
	}
	if k < len(body) && (body[k] == 'e' || body[k] == 'E') {
		k++
		if k < len(body) && (body[k] == '+' || body[k] == '-') {
			k++
		}
		n := 0
		for k < len(body) && body[k] >= '0' && body[k] <= '9' {
			k++
			n++
		}
		if n == 0 {
			return 0, bad
		}
	}
	if k != len(body) {
		return 0, bad
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, bad // overflow: Python raises OverflowError
	}
	return v, nil
}

// unquoteString reads the operand of STRING: the quotes, then
// codecs.escape_decode of the body. The bytes are turned into text as
// torch.load does (UTF-8), or Latin-1 when they are not UTF-8 (torch.load
// with encoding="latin1").
func unquoteString(l string) (string, error) {
	if len(l) < 2 || (l[0] != '\'' && l[0] != '"') || l[len(l)-1] != l[0] {
		return "", fmt.Errorf("STRING argument %q is not quoted", truncate(l))
	}
	b, err := escapeDecode(l[1 : len(l)-1])
	if err != nil {
		return "", err
	}
	if utf8.Valid(b) {
		return string(b), nil
	}
	return latin1(b), nil
}

// ControlEscape is the control character a backslash escape letter stands
// for in the strings of Python, C and JSON alike (\b \f \n \r \t); false
// for any other letter.
func ControlEscape(c byte) (byte, bool) {
	switch c {
	case 'b':
		return '\b', true
	case 'f':
		return '\f', true
	case 'n':
		return '\n', true
	case 'r':
		return '\r', true
	case 't':
		return '\t', true
	}
	return 0, false
}

// escapeDecode is CPython's _PyBytes_DecodeEscape.
func escapeDecode(body string) ([]byte, error) {
	out := make([]byte, 0, len(body))
	for i := 0; i < len(body); i++ {
		c := body[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		i++
		if i >= len(body) {
			return nil, errors.New(`STRING: trailing \ in string`)
		}
		c = body[i]
		if e, ok := ControlEscape(c); ok {
			out = append(out, e)
			continue
		}
		switch c {
		case '\n':
		case '\\', '\'', '"':
			out = append(out, c)
		case 'v':
			out = append(out, '\v')
		case 'a':
			out = append(out, 7)
		case '0', '1', '2', '3', '4', '5', '6', '7':
			v := int(c - '0')
			for n := 0; n < 2 && i+1 < len(body) && body[i+1] >= '0' && body[i+1] <= '7'; n++ {
				i++
				v = v*8 + int(body[i]-'0')
			}
			out = append(out, byte(v)) // C truncates \400-\777 to a char
		case 'x':
			if i+2 < len(body) && hexDigit(body[i+1]) >= 0 && hexDigit(body[i+2]) >= 0 {
				out = append(out, byte(hexDigit(body[i+1])<<4|hexDigit(body[i+2])))
				i += 2
				continue
			}
			return nil, fmt.Errorf(`STRING: invalid \x escape at position %d`, i-1)
		default:
			out = append(out, '\\', c)
		}
	}
	return out, nil
}

// appendWTF8 appends a code point as UTF-8, surrogates included (so a lone
// surrogate stays distinct from U+FFFD and from every other string).
func appendWTF8(b []byte, r rune) []byte {
	if r >= 0xD800 && r <= 0xDFFF {
		return append(b, 0xED, byte(0x80|(r>>6)&0x3F), byte(0x80|r&0x3F))
	}
	return utf8.AppendRune(b, r)
}

// rawUnicodeUnescape decodes the operand of UNICODE (raw-unicode-escape).
func rawUnicodeUnescape(l string) (string, error) {
	out := make([]byte, 0, len(l))
	for i := 0; i < len(l); i++ {
		c := l[i]
		if c != '\\' || i+1 >= len(l) {
			out = appendWTF8(out, rune(c))
			continue
		}
		i++
		n := 0
		switch l[i] {
		case 'u':
			n = 4
		case 'U':
			n = 8
		default:
			out = append(out, '\\')
			out = appendWTF8(out, rune(l[i]))
			continue
		}
		var v rune
		for k := 0; k < n; k++ {
			if i+1 >= len(l) {
				return "", fmt.Errorf(`UNICODE: truncated \%c escape`, l[i-k])
			}
			i++
			d := hexDigit(l[i])
			if d < 0 {
				return "", errors.New(`UNICODE: truncated \u escape`)
			}
			v = v<<4 | rune(d)
		}
		if v > utf8.MaxRune || v < 0 {
			return "", errors.New(`UNICODE: \Uxxxxxxxx out of range`)
		}
		out = appendWTF8(out, v)
	}
	return string(out), nil
}

// utf8SurrogatePass checks b the way Python's "utf-8" codec with
// errors="surrogatepass" does: UTF-8, where the three-byte encodings of
// U+D800..U+DFFF are allowed too.
func utf8SurrogatePass(b []byte) error {
	for i := 0; i < len(b); {
		if b[i] < 0x80 {
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			if i+2 < len(b) && b[i] == 0xED && b[i+1] >= 0xA0 && b[i+1] <= 0xBF && b[i+2] >= 0x80 && b[i+2] <= 0xBF {
				i += 3
				continue
			}
			return fmt.Errorf("string is not valid UTF-8 at byte %d", i)
		}
		i += n
	}
	return nil
}

// asciiLine checks an INST operand line.
func asciiLine(l string) error {
	for i := 0; i < len(l); i++ {
		if l[i] >= 0x80 {
			return fmt.Errorf("INST operand %q is not ASCII", truncate(l))
		}
	}
	return nil
}
