// Package trace reads memory timelines from CSV files and scores the leak
// detector against labelled directories of them (the format of
// ../shared/traces: a CSV per job and a labels.json). It does file I/O so
// that package analyze need not.
package trace

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/vramguard/vramguard/internal/analyze"
)

// Header is the required first line of a trace CSV. Optional columns may
// follow, in any order: rss, limit, step, inactive_split, alloc_retries.
const Header = "t,allocated,reserved,used,total"

var optional = map[string]bool{"rss": true, "limit": true, "step": true, "inactive_split": true, "alloc_retries": true}

// ReadFile reads a trace CSV file.
func ReadFile(path string) ([]analyze.Sample, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s, err := Read(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// Read parses a trace CSV: the header, then one sample a line. A cell may be
// empty (the source was absent); every other cell must be a finite,
// non-negative number; t must not go backwards. Errors name the line and the
// column.
func Read(r io.Reader) ([]analyze.Sample, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	if !sc.Scan() {
		if err := sc.Err(); err != nil {
			return nil, err
		}
		return nil, errors.New("empty file: want the header " + Header)
	}
	head := strings.Split(strings.TrimSpace(strings.TrimPrefix(sc.Text(), "\ufeff")), ",")
	want := strings.Split(Header, ",")
	if len(head) < len(want) {
		return nil, fmt.Errorf("line 1: bad header %q: want %s", sc.Text(), Header)
	}
	for i, w := range want {
		if strings.TrimSpace(head[i]) != w {
			return nil, fmt.Errorf("line 1: bad header %q: want %s", sc.Text(), Header)
		}
	}
	seen := map[string]bool{}
	for _, h := range head[len(want):] {
		h = strings.TrimSpace(h)
		if !optional[h] || seen[h] {
			return nil, fmt.Errorf("line 1: unknown or repeated column %q (known extras: rss, limit, step, inactive_split, alloc_retries)", h)
		}
		seen[h] = true
	}
	for i := range head {
		head[i] = strings.TrimSpace(head[i])
	}
	var out []analyze.Sample
	line := 1
	prevT := math.Inf(-1)
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		cells := strings.Split(text, ",")
		if len(cells) != len(head) {
			return nil, fmt.Errorf("line %d: %d cells, want %d (%s)", line, len(cells), len(head), strings.Join(head, ","))
		}
		s := analyze.NaNSample(0)
		for i, c := range cells {
			c = strings.TrimSpace(c)
			if c == "" {
				if head[i] == "t" {
					return nil, fmt.Errorf("line %d: empty t", line)
				}
				continue
			}
			v, err := strconv.ParseFloat(c, 64)
			if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, fmt.Errorf("line %d, column %s: %q is not a finite number", line, head[i], c)
			}
			if v < 0 {
				return nil, fmt.Errorf("line %d, column %s: %q is negative", line, head[i], c)
			}
			switch head[i] {
			case "t":
				s.T = v
			case "allocated":
				s.Allocated = v
			case "reserved":
				s.Reserved = v
			case "used":
				s.Used = v
			case "total":
				s.Total = v
			case "rss":
				s.RSS = v
			case "limit":
				s.Limit = v
			case "inactive_split":
				s.InactiveSplit = v
			case "alloc_retries":
				s.AllocRetries = v
			case "step":
				if v != math.Trunc(v) {
					return nil, fmt.Errorf("line %d, column step: %q is not a whole number", line, c)
				}
				s.Step = int64(v)
			}
		}
		if s.T < prevT {
			return nil, fmt.Errorf("line %d: time goes backwards (%g after %g)", line, s.T, prevT)
		}
		prevT = s.T
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %w", line+1, err)
	}
	return out, nil
}
