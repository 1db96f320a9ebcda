package snapshot

import (
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/vramguard/vramguard/internal/pickle"
)

func isJSONStart(b byte) bool {
	return b == '{' || b == '[' || b == ' ' || b == '\n' || b == '\r' || b == '\t'
}

// jsonReader scans the JSON form of the schema in one pass over a
// read-ahead window: whitespace, strings and numbers cost one look at each
// byte, and values go into the same builders a pickle's do.
type jsonReader struct {
	d          *decoder
	r          io.Reader
	buf        []byte
	pos, end   int
	off        int64 // absolute offset of buf[pos]
	eof        bool
	progress   func(int64)
	lastReport int64
	scratch    []byte
	// items is one reusable buffer per depth: an array's items go to its
	// list a batch at a time
	items [][]val
}

var errJSONEOF = errors.New("the JSON ends early (truncated?)")

// runJSON reads the JSON form of the schema into the same values a pickle
// gives, sealing each dict as it closes, so both forms build one model.
func (d *decoder) runJSON(r io.Reader, progress func(int64)) (val, error) {
	j := &jsonReader{d: d, r: r, buf: make([]byte, 256<<10), progress: progress}
	v, err := j.value(0)
	if err == nil {
		if c, ok := j.skipSpace(); ok {
			err = j.errf("data after the JSON value (%q)", c)
		}
	}
	if err != nil {
		if errors.Is(err, errJSONEOF) {
			return val{}, fmt.Errorf("%w: %v", ErrNotSnapshot, errJSONEOF)
		}
		return val{}, err
	}
	d.seal(&v)
	return v, nil
}

func (j *jsonReader) errf(format string, a ...any) error {
	return fmt.Errorf("%w: bad JSON at byte %d: %s", ErrNotSnapshot, j.off, fmt.Sprintf(format, a...))
}

// more makes at least one byte readable; false at the end of the input.
func (j *jsonReader) more() (bool, error) {
	if j.pos < j.end {
		return true, nil
	}
	if j.eof {
		return false, nil
	}
	j.pos, j.end = 0, 0
	for j.end == 0 && !j.eof {
		n, err := j.r.Read(j.buf)
		j.end = n
		if err == io.EOF {
			j.eof = true
		} else if err != nil {
			return false, fmt.Errorf("read: %w", err)
		}
	}
	return j.end > 0, nil
}

func (j *jsonReader) advance(n int) {
	j.pos += n
	j.off += int64(n)
	if j.progress != nil && j.off-j.lastReport >= 4<<20 {
		j.lastReport = j.off
		j.progress(j.off)
	}
}

// skipSpace skips whitespace and returns the next byte, not consumed.
func (j *jsonReader) skipSpace() (byte, bool) {
	for {
		if ok, _ := j.more(); !ok {
			return 0, false
		}
		b := j.buf[j.pos:j.end]
		for i, c := range b {
			if c != ' ' && c != '\n' && c != '\r' && c != '\t' {
				j.advance(i)
				return c, true
			}
		}
		j.advance(len(b))
	}
}

func (j *jsonReader) next() (byte, error) {
	c, ok := j.skipSpace()
	if !ok {
		return 0, errJSONEOF
	}
	return c, nil
}

func (j *jsonReader) expect(c byte) error {
	got, err := j.next()
	if err != nil {
		return err
	}
	if got != c {
		return j.errf("%q where %q belongs", got, c)
	}
	j.advance(1)
	return nil
}

func (j *jsonReader) value(depth int) (val, error) {
	d := j.d
	if depth > d.lim.MaxDepth {
		return val{}, j.errf("nested more than %d deep", d.lim.MaxDepth)
	}
	c, err := j.next()
	if err != nil {
		return val{}, err
	}
	switch {
	case c == '{':
		j.advance(1)
		kv := j.buf4(depth)
		none, err := j.elements('}', "an object's value", func(c byte) error {
			if c != '"' {
				return j.errf("%q where a key belongs", c)
			}
			k, err := j.str()
			if err != nil {
				return err
			}
			if err := j.expect(':'); err != nil {
				return err
			}
			v, err := j.value(depth + 1)
			if err != nil {
				return err
			}
			kv = append(kv, strVal(k, kStr), v)
			if len(kv)/2 > maxDictItems {
				// refused as it grows, as the pickle view's dicts are
				return d.refuse("a dict of more than %d items, and a memory snapshot's dicts hold a few keys", maxDictItems)
			}
			return nil
		})
		if err != nil {
			return val{}, err
		}
		if none {
			return dictVal(&dictB{}), nil
		}
		j.items[depth] = kv[:0]
		db := &dictB{}
		if err := d.setItems(db, kv); err != nil {
			return val{}, err
		}
		return dictVal(db), nil
	case c == '[':
		j.advance(1)
		items := j.buf4(depth)
		var l *listB
		none, err := j.elements(']', "an array's item", func(byte) error {
			v, err := j.value(depth + 1)
			if err != nil {
				return err
			}
			items = append(items, v)
			if len(items) == 1024 {
				if l == nil {
					l = &listB{}
				}
				if err := d.appendItems(l, items); err != nil {
					return err
				}
				items = items[:0]
			}
			return nil
		})
		if err != nil {
			return val{}, err
		}
		if none {
			return listVal(&listB{}), nil
		}
		j.items[depth] = items[:0]
		// two-item lists of ints stand for tuples (segment_pool_id)
		if l == nil && len(items) == 2 && items[0].k == kInt && items[1].k == kInt {
			return tupleVal(append([]val(nil), items...)), nil
		}
		if l == nil {
			l = &listB{}
		}
		if err := d.appendItems(l, items); err != nil {
			return val{}, err
		}
		return listVal(l), nil
	case c == '"':
		s, err := j.str()
		if err != nil {
			return val{}, err
		}
		return strVal(s, kStr), nil
	case c == '-' || (c >= '0' && c <= '9'):
		return j.number()
	case c == 't':
		return val{k: kBool, i: 1}, j.word("true")
	case c == 'f':
		return val{k: kBool}, j.word("false")
	case c == 'n':
		return val{k: kNone}, j.word("null")
	}
	return val{}, j.errf("%q where a value belongs", c)
}

// elements reads the items of an object or array, whose opening byte was
// read, through its close byte: item reads one, given its first byte, and
// commas separate them (what names what a comma follows, for the error).
// none says there were no items.
func (j *jsonReader) elements(close byte, what string, item func(c byte) error) (none bool, err error) {
	c, err := j.next()
	if err != nil {
		return false, err
	}
	if c == close {
		j.advance(1)
		return true, nil
	}
	for {
		if err := item(c); err != nil {
			return false, err
		}
		if c, err = j.next(); err != nil {
			return false, err
		}
		j.advance(1)
		if c == close {
			return false, nil
		}
		if c != ',' {
			return false, j.errf("%q after %s", c, what)
		}
		if c, err = j.next(); err != nil {
			return false, err
		}
	}
}

// buf4 is the reusable item buffer of a depth.
func (j *jsonReader) buf4(depth int) []val {
	for len(j.items) <= depth {
		j.items = append(j.items, nil)
	}
	b := j.items[depth][:0]
	j.items[depth] = nil // a value nested at this depth never shares it
	return b
}

func (j *jsonReader) word(w string) error {
	for i := 0; i < len(w); i++ {
		if ok, err := j.more(); err != nil {
			return err
		} else if !ok {
			return errJSONEOF
		}
		if j.buf[j.pos] != w[i] {
			return j.errf("bad literal (want %s)", w)
		}
		j.advance(1)
	}
	return nil
}

// token collects the bytes of a number.
func (j *jsonReader) number() (val, error) {
	t := j.scratch[:0]
	for {
		ok, err := j.more()
		if err != nil {
			return val{}, err
		}
		if !ok {
			break
		}
		c := j.buf[j.pos]
		if !(c >= '0' && c <= '9' || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E') {
			break
		}
		if len(t) > 4096 {
			return val{}, j.errf("a number over 4096 digits")
		}
		t = append(t, c)
		j.advance(1)
	}
	j.scratch = t
	// the common case, a plain integer of up to 18 digits, without a copy
	if neg, digits := len(t) > 0 && t[0] == '-', t; len(t) > 0 && len(t) <= 19 {
		if neg {
			digits = t[1:]
		}
		var v int64
		ok := len(digits) > 0 && len(digits) <= 18 && (digits[0] != '0' || len(digits) == 1)
		for _, c := range digits {
			if c < '0' || c > '9' {
				ok = false
				break
			}
			v = v*10 + int64(c-'0')
		}
		if ok {
			if neg {
				v = -v
			}
			return val{k: kInt, i: v}, nil
		}
	}
	s := string(t)
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		return val{k: kInt, i: i}, nil
	}
	if u, err := strconv.ParseUint(s, 10, 64); err == nil {
		return val{k: kUint, i: int64(u)}, nil
	}
	if b, ok := new(big.Int).SetString(s, 10); ok {
		j.d.snap.Saturated++
		if b.Sign() < 0 {
			return val{k: kBig, i: math.MinInt64}, nil
		}
		return val{k: kBig, i: math.MaxInt64}, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return val{}, j.errf("bad number %q", s)
	}
	return val{k: kFloat, i: int64(math.Float64bits(f))}, nil
}

// str reads a string (at its opening quote), unescaped and interned.
func (j *jsonReader) str() (string, error) {
	j.advance(1)
	t := j.scratch[:0]
	lim := j.d.lim.MaxString
	for {
		ok, err := j.more()
		if err != nil {
			return "", err
		}
		if !ok {
			return "", errJSONEOF
		}
		b := j.buf[j.pos:j.end]
		i := 0
		for i < len(b) && b[i] != '"' && b[i] != '\\' && b[i] >= 0x20 {
			i++
		}
		t = append(t, b[:i]...)
		j.advance(i)
		if int64(len(t)) > lim {
			return "", fmt.Errorf("%w: a string of over %d bytes is over the limit", ErrNotSnapshot, lim)
		}
		if i == len(b) {
			continue
		}
		switch c := b[i]; {
		case c == '"':
			j.advance(1)
			j.scratch = t
			if !utf8.Valid(t) {
				return "", j.errf("a string is not UTF-8")
			}
			return j.d.string(t), nil
		case c < 0x20:
			return "", j.errf("a control character in a string")
		}
		// an escape
		j.advance(1)
		e, err := j.byte()
		if err != nil {
			return "", err
		}
		if c, ok := pickle.ControlEscape(e); ok {
			t = append(t, c)
			continue
		}
		switch e {
		case '"', '\\', '/':
			t = append(t, e)
		case 'u':
			r, err := j.hex4()
			if err != nil {
				return "", err
			}
			if utf16.IsSurrogate(r) {
				// a pair: \uD8xx\uDCxx; a lone half is U+FFFD, as Go's decoder has it
				r2 := utf8.RuneError
				if ok, _ := j.more(); ok && j.buf[j.pos] == '\\' {
					j.advance(1)
					if c, err := j.byte(); err != nil {
						return "", err
					} else if c != 'u' {
						return "", j.errf("bad escape")
					}
					if r2, err = j.hex4(); err != nil {
						return "", err
					}
				}
				if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
					r = d
				} else {
					t = utf8.AppendRune(t, utf8.RuneError)
					r = r2
					if utf16.IsSurrogate(r) {
						r = utf8.RuneError
					}
				}
			}
			t = utf8.AppendRune(t, r)
		default:
			return "", j.errf("bad escape \\%c", e)
		}
	}
}

func (j *jsonReader) byte() (byte, error) {
	ok, err := j.more()
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, errJSONEOF
	}
	c := j.buf[j.pos]
	j.advance(1)
	return c, nil
}

func (j *jsonReader) hex4() (rune, error) {
	var r rune
	for range 4 {
		c, err := j.byte()
		if err != nil {
			return 0, err
		}
		var v byte
		switch {
		case c >= '0' && c <= '9':
			v = c - '0'
		case c >= 'a' && c <= 'f':
			v = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			v = c - 'A' + 10
		default:
			return 0, j.errf("bad \\u escape")
		}
		r = r<<4 | rune(v)
	}
	return r, nil
}
