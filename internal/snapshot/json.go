package snapshot

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"strconv"
)

func isJSONStart(b byte) bool {
	return b == '{' || b == '[' || b == ' ' || b == '\n' || b == '\r' || b == '\t'
}

// countingReader reports progress for the JSON form.
type countingReader struct {
	d *decoder
}

func (c countingReader) Read(p []byte) (int, error) {
	d := c.d
	if d.pos == d.end {
		if d.eof {
			return 0, io.EOF
		}
		if err := d.fill(1); err != nil {
			if d.eof {
				return 0, io.EOF
			}
			return 0, err
		}
	}
	n := copy(p, d.buf[d.pos:d.end])
	d.advance(n)
	return n, nil
}

// runJSON reads the JSON form of the schema into the same values a pickle
// gives, sealing each dict as it closes, so both forms build one model.
func (d *decoder) runJSON() (val, error) {
	dec := json.NewDecoder(countingReader{d})
	dec.UseNumber()
	v, err := d.jsonValue(dec, 0)
	if err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return val{}, fmt.Errorf("%w: bad JSON at byte %d: %v", ErrNotSnapshot, se.Offset, err)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return val{}, fmt.Errorf("%w: the JSON ends early (truncated?)", ErrNotSnapshot)
		}
		return val{}, err
	}
	d.seal(&v)
	return v, nil
}

func (d *decoder) jsonValue(dec *json.Decoder, depth int) (val, error) {
	if depth > d.lim.MaxDepth {
		return val{}, fmt.Errorf("%w: JSON nested more than %d deep", ErrNotSnapshot, d.lim.MaxDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return val{}, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			var kv []val
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return val{}, err
				}
				k, _ := kt.(string)
				v, err := d.jsonValue(dec, depth+1)
				if err != nil {
					return val{}, err
				}
				kv = append(kv, strVal(d.string([]byte(k)), kStr), v)
			}
			if _, err := dec.Token(); err != nil {
				return val{}, err
			}
			db := &dictB{}
			if err := d.setItems(db, kv); err != nil {
				return val{}, err
			}
			return dictVal(db), nil
		case '[':
			var items []val
			for dec.More() {
				v, err := d.jsonValue(dec, depth+1)
				if err != nil {
					return val{}, err
				}
				items = append(items, v)
			}
			if _, err := dec.Token(); err != nil {
				return val{}, err
			}
			// two-item lists of ints stand for tuples (segment_pool_id)
			if len(items) == 2 && items[0].k == kInt && items[1].k == kInt {
				return tupleVal(items), nil
			}
			l := &listB{}
			d.appendItems(l, items)
			return listVal(l), nil
		}
	case string:
		if int64(len(t)) > d.lim.MaxString {
			return val{}, fmt.Errorf("%w: a string of %d bytes is over the limit", ErrNotSnapshot, len(t))
		}
		return strVal(d.string([]byte(t)), kStr), nil
	case json.Number:
		if i, err := strconv.ParseInt(string(t), 10, 64); err == nil {
			return val{k: kInt, i: i}, nil
		}
		if u, err := strconv.ParseUint(string(t), 10, 64); err == nil {
			return val{k: kUint, i: int64(u)}, nil
		}
		if b, ok := new(big.Int).SetString(string(t), 10); ok {
			d.snap.Saturated++
			if b.Sign() < 0 {
				return val{k: kBig, i: math.MinInt64}, nil
			}
			return val{k: kBig, i: math.MaxInt64}, nil
		}
		f, err := strconv.ParseFloat(string(t), 64)
		if err != nil {
			return val{}, fmt.Errorf("%w: bad number %q", ErrNotSnapshot, string(t))
		}
		return val{k: kFloat, i: int64(math.Float64bits(f))}, nil
	case bool:
		if t {
			return val{k: kBool, i: 1}, nil
		}
		return val{k: kBool}, nil
	case nil:
		return val{k: kNone}, nil
	}
	return val{}, fmt.Errorf("%w: unexpected JSON token %v", ErrNotSnapshot, tok)
}
