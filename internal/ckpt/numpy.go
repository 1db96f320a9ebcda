package ckpt

import (
	"encoding/binary"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/vramguard/vramguard/internal/lazyre"
)

// numpy's own formats, as ckpt scan names them.
const (
	FormatNpy = "npy" // numpy.save
	FormatNpz = "npz" // numpy.savez: a zip of .npy members
)

// npyMagic starts every .npy file (numpy.lib.format.MAGIC_PREFIX).
const npyMagic = "\x93NUMPY"

// maxNpyHeader bounds the header read. numpy.load with allow_pickle=True
// accepts any header length (max_header_size=2**64); real headers are a
// few hundred bytes, so a longer one is not understood rather than read.
const maxNpyHeader = 1 << 20

// isNpy reports whether r holds .npy bytes at 0.
func isNpy(r io.ReaderAt) bool {
	var b [6]byte
	n, _ := r.ReadAt(b[:], 0)
	return n == 6 && string(b[:]) == npyMagic
}

// npyHeader is what numpy.lib.format._read_array_header learns from a .npy
// header, as far as the scan needs it.
type npyHeader struct {
	dataOff   int64 // where the array data (or the pickle) starts
	hasObject bool  // dtype.hasobject: numpy.load unpickles the data
}

// readNpyHeader parses a .npy header the way numpy 1.24 does: magic,
// version (1.0 and 2.0 latin-1 with a 2- or 4-byte length, 3.0 UTF-8), a
// Python dict literal with exactly descr, fortran_order and shape. An
// error means the scanner does not understand the header, and so cannot
// say whether numpy would unpickle what follows.
func readNpyHeader(r io.ReaderAt, size int64) (npyHeader, error) {
	var h npyHeader
	var pre [12]byte
	n, _ := r.ReadAt(pre[:], 0)
	if n < 10 || string(pre[:6]) != npyMagic {
		return h, fmt.Errorf("no .npy magic")
	}
	major, minor := pre[6], pre[7]
	var hlen, start int64
	switch {
	case major == 1 && minor == 0:
		hlen, start = int64(binary.LittleEndian.Uint16(pre[8:10])), 10
	case (major == 2 || major == 3) && minor == 0 && n >= 12:
		hlen, start = int64(binary.LittleEndian.Uint32(pre[8:12])), 12
	default:
		return h, fmt.Errorf(".npy version %d.%d is not one numpy reads (1.0, 2.0, 3.0)", major, minor)
	}
	if hlen > maxNpyHeader {
		return h, fmt.Errorf(".npy header of %d bytes is over the scanner's %d-byte bound", hlen, maxNpyHeader)
	}
	if start+hlen > size {
		return h, fmt.Errorf(".npy header of %d bytes runs past the end of the data (%d bytes)", hlen, size)
	}
	buf := make([]byte, hlen)
	if _, err := r.ReadAt(buf, start); err != nil && int64(len(buf)) != hlen {
		return h, fmt.Errorf("read .npy header: %v", err)
	}
	text := latin1(buf)
	if major == 3 {
		if !utf8.Valid(buf) {
			return h, fmt.Errorf(".npy 3.0 header is not UTF-8")
		}
		text = string(buf)
	}
	v, err := parsePyLiteral(text, major <= 2)
	if err != nil {
		return h, fmt.Errorf(".npy header %s: %v", strconv.Quote(truncateStr(text, 80)), err)
	}
	d, ok := v.(pyDict)
	if !ok || len(d) != 3 {
		return h, fmt.Errorf(".npy header is not a dict of descr, fortran_order and shape")
	}
	if _, ok := d["fortran_order"].(bool); !ok {
		return h, fmt.Errorf(".npy header's fortran_order is not a bool")
	}
	shape, ok := d["shape"].(pyTuple)
	if !ok {
		return h, fmt.Errorf(".npy header's shape is not a tuple")
	}
	for _, s := range shape {
		if _, ok := s.(int64); !ok {
			return h, fmt.Errorf(".npy header's shape is not a tuple of ints")
		}
	}
	descr, ok := d["descr"]
	if !ok {
		return h, fmt.Errorf(".npy header has no descr")
	}
	obj, err := descrHasObject(descr, 0)
	if err != nil {
		return h, err
	}
	h.dataOff, h.hasObject = start+hlen, obj
	return h, nil
}

func latin1(b []byte) string {
	var s strings.Builder
	for _, c := range b {
		s.WriteRune(rune(c))
	}
	return s.String()
}

func truncateStr(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// plainDType matches the dtype strings numpy.save writes for arrays that
// hold no Python objects: bool, ints, floats, complex, datetimes, bytes,
// str and void, with an optional byte order.
var plainDType = lazyre.New(`^[<>|=]?(\?|b1|[iuf][1248]|f16|c(8|16|32)|[mM]8(\[[0-9]*(Y|M|W|D|h|m|s|ms|us|ns|ps|fs|as|generic)\])?|[SUV][0-9]+|[bBhHiIlLqQpPefdgFDG])$`)

// descrHasObject is dtype.hasobject for a descr as descr_to_dtype reads
// it: a dtype string, a (descr, shape) tuple, or a list of (name, descr)
// or (name, descr, shape) fields. A string that is neither a plain dtype
// nor an object one is not understood.
func descrHasObject(v any, depth int) (bool, error) {
	if depth > 64 {
		return false, fmt.Errorf(".npy descr nests deeper than the scanner follows")
	}
	switch x := v.(type) {
	case string:
		if plainDType.MatchString(x) {
			return false, nil
		}
		if s := strings.TrimLeft(x, "<>|="); s == "O" || s == "O4" || s == "O8" || s == "object" || s == "object_" {
			return true, nil
		}
		return false, fmt.Errorf(".npy descr %q is not a dtype the scanner knows", x)
	case pyTuple:
		if len(x) != 2 {
			return false, fmt.Errorf(".npy descr tuple has %d items, not (descr, shape)", len(x))
		}
		return descrHasObject(x[0], depth+1)
	case pyList:
		obj := false
		for _, f := range x {
			ft, ok := f.(pyTuple)
			if !ok || (len(ft) != 2 && len(ft) != 3) {
				return false, fmt.Errorf(".npy descr field is not (name, descr[, shape])")
			}
			o, err := descrHasObject(ft[1], depth+1)
			if err != nil {
				return false, err
			}
			obj = obj || o
		}
		return obj, nil
	}
	return false, fmt.Errorf(".npy descr is a %T, not a dtype descriptor", v)
}

// scanNpy scans .npy bytes: an object dtype means numpy.load(allow_pickle=
// True) unpickles what follows the header (one pickle.load), so that
// pickle is scanned; any other dtype is raw data. A header the scanner
// does not understand is a finding of its own.
func scanNpy(r io.ReaderAt, size int64, record string, res *ScanResult) {
	h, err := readNpyHeader(r, size)
	if err != nil {
		res.notUnderstood(record, "%v", err)
		return
	}
	if !h.hasObject {
		return
	}
	name := record
	if name == "" {
		name = "the .npy object array's pickle"
	} else {
		name += " (object array pickle)"
	}
	if h.dataOff >= size {
		// numpy.load fails at EOF: nothing to run.
		res.Errors = append(res.Errors, fmt.Sprintf("%s: object array with no pickle after its header", name))
		return
	}
	scanOne(r, h.dataOff, size, name, res)
}

// Python literals as ast.literal_eval returns them for a .npy header.
type (
	pyDict  map[string]any
	pyTuple []any
	pyList  []any
)

// parsePyLiteral parses the subset of Python literal syntax numpy writes
// and reads in a .npy header: dicts with string keys, tuples, lists,
// strings, ints, True, False, None. longs says a trailing L on an int is
// dropped (numpy's _filter_header for versions 1.0 and 2.0). Anything else
// is an error: literal_eval might accept it, and the scan then says it
// does not understand the header rather than guess.
func parsePyLiteral(s string, longs bool) (any, error) {
	p := &pyParser{s: s, longs: longs}
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	p.space()
	if p.i != len(p.s) {
		return nil, fmt.Errorf("unexpected %q at byte %d", p.s[p.i], p.i)
	}
	return v, nil
}

type pyParser struct {
	s     string
	i     int
	longs bool
}

func (p *pyParser) space() {
	for p.i < len(p.s) && strings.IndexByte(" \t\n\r\f", p.s[p.i]) >= 0 {
		p.i++
	}
}

func (p *pyParser) value(depth int) (any, error) {
	if depth > 64 {
		return nil, fmt.Errorf("nested deeper than the scanner follows")
	}
	p.space()
	if p.i >= len(p.s) {
		return nil, fmt.Errorf("unexpected end")
	}
	switch c := p.s[p.i]; {
	case c == '{':
		items, err := p.seq('}', depth, true)
		if err != nil {
			return nil, err
		}
		d := pyDict{}
		for j := 0; j < len(items); j += 2 {
			k, ok := items[j].(string)
			if !ok {
				return nil, fmt.Errorf("dict key is not a string")
			}
			if _, dup := d[k]; dup {
				return nil, fmt.Errorf("dict key %q repeated", k)
			}
			d[k] = items[j+1]
		}
		return d, nil
	case c == '[':
		items, err := p.seq(']', depth, false)
		return pyList(items), err
	case c == '(':
		start := p.i
		items, err := p.seq(')', depth, false)
		if err != nil {
			return nil, err
		}
		// (x) is x; (x,) and () are tuples.
		if len(items) == 1 && !strings.HasSuffix(strings.TrimRight(p.s[start:p.i-1], " \t\n\r\f"), ",") {
			return items[0], nil
		}
		return pyTuple(items), nil
	case c == '\'' || c == '"':
		return p.str()
	case c == 'u' || c == 'U':
		if p.i+1 < len(p.s) && (p.s[p.i+1] == '\'' || p.s[p.i+1] == '"') {
			p.i++
			return p.str()
		}
	case c == '-' || c == '+' || (c >= '0' && c <= '9'):
		return p.int()
	}
	for _, kw := range []struct {
		word string
		v    any
	}{{"True", true}, {"False", false}, {"None", nil}} {
		if strings.HasPrefix(p.s[p.i:], kw.word) && !identChar(p.s, p.i+len(kw.word)) {
			p.i += len(kw.word)
			return kw.v, nil
		}
	}
	return nil, fmt.Errorf("unexpected %q at byte %d", p.s[p.i], p.i)
}

func identChar(s string, i int) bool {
	if i >= len(s) {
		return false
	}
	c := s[i]
	return c == '_' || c >= 0x80 || (c >= '0' && c <= '9') || (c|0x20 >= 'a' && c|0x20 <= 'z')
}

// seq reads items up to end, separated by commas with an optional trailing
// one; dict items come as key, value pairs.
func (p *pyParser) seq(end byte, depth int, dict bool) ([]any, error) {
	p.i++
	var items []any
	for {
		p.space()
		if p.i < len(p.s) && p.s[p.i] == end {
			p.i++
			return items, nil
		}
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		items = append(items, v)
		p.space()
		if dict {
			if p.i >= len(p.s) || p.s[p.i] != ':' {
				return nil, fmt.Errorf("dict item without ':' at byte %d", p.i)
			}
			p.i++
			v, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			items = append(items, v)
			p.space()
		}
		if p.i < len(p.s) && p.s[p.i] == ',' {
			p.i++
			continue
		}
		if p.i < len(p.s) && p.s[p.i] == end {
			p.i++
			return items, nil
		}
		return nil, fmt.Errorf("expected ',' or %q at byte %d", end, p.i)
	}
}

func (p *pyParser) str() (string, error) {
	q := p.s[p.i]
	if strings.HasPrefix(p.s[p.i:], strings.Repeat(string(q), 3)) {
		return "", fmt.Errorf("triple-quoted string")
	}
	p.i++
	var b strings.Builder
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == q:
			p.i++
			return b.String(), nil
		case c == '\n':
			return "", fmt.Errorf("newline in a string")
		case c == '\\':
			if p.i+1 >= len(p.s) {
				return "", fmt.Errorf("unterminated string")
			}
			e := p.s[p.i+1]
			switch e {
			case '\\', '\'', '"':
				b.WriteByte(e)
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			default:
				return "", fmt.Errorf("string escape \\%c the scanner does not read", e)
			}
			p.i += 2
		default:
			b.WriteByte(c)
			p.i++
		}
	}
	return "", fmt.Errorf("unterminated string")
}

func (p *pyParser) int() (int64, error) {
	start := p.i
	if p.s[p.i] == '-' || p.s[p.i] == '+' {
		p.i++
	}
	d := p.i
	for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
		p.i++
	}
	if p.i == d {
		return 0, fmt.Errorf("sign without digits at byte %d", start)
	}
	num := p.s[start:p.i]
	if p.longs && p.i < len(p.s) && (p.s[p.i] == 'L' || p.s[p.i] == 'l') {
		p.i++
	}
	if identChar(p.s, p.i) || (p.i < len(p.s) && p.s[p.i] == '.') {
		return 0, fmt.Errorf("number the scanner does not read at byte %d", start)
	}
	if len(num) > 1 && strings.TrimLeft(num, "+-")[0] == '0' && strings.Trim(num, "+-0") != "" {
		return 0, fmt.Errorf("leading zero at byte %d (Python refuses it)", start)
	}
	v, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("int at byte %d: %v", start, err)
	}
	return v, nil
}
