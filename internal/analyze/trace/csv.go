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
	"slices"
	"strconv"
	"strings"

	"github.com/vramguard/vramguard/internal/analyze"
)

// Header is the required first line of a trace CSV. Optional columns may
// follow, in any order: Extras.
const Header = "t,allocated,reserved,used,total"

// Extras are the optional columns, in the order Writer writes them: the host
// figures (rss: resident set of the job's process tree; pss: its
// proportional set size; limit: the host memory limit in force, the
// tightest cgroup limit on the job's path or the host's RAM; cgroup_usage:
// the usage of the job's own cgroup, page cache included), all in bytes,
// then the probe's step, inactive_split (bytes) and alloc_retries
// (cumulative). The detector reads rss and limit (a host-side leak,
// forecast against the limit), step, inactive_split and alloc_retries; pss
// and cgroup_usage are kept for people and other tools.
var Extras = []string{"rss", "pss", "limit", "cgroup_usage", "step", "inactive_split", "alloc_retries"}

// Row is one line of a trace CSV: the detector's sample and the figures it
// does not read. Absent figures are NaN (Step: -1), empty cells in the file.
type Row struct {
	analyze.Sample
	PSS         float64
	CgroupUsage float64
}

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
	rows, err := ReadRows(r)
	if err != nil {
		return nil, err
	}
	out := make([]analyze.Sample, len(rows))
	for i := range rows {
		out[i] = rows[i].Sample
	}
	return out, nil
}

// ReadRows is Read keeping every column.
func ReadRows(r io.Reader) ([]Row, error) {
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
		if !slices.Contains(Extras, h) || seen[h] {
			return nil, fmt.Errorf("line 1: unknown or repeated column %q (known extras: %s)", h, strings.Join(Extras, ", "))
		}
		seen[h] = true
	}
	for i := range head {
		head[i] = strings.TrimSpace(head[i])
	}
	var out []Row
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
		s := Row{Sample: analyze.NaNSample(0), PSS: math.NaN(), CgroupUsage: math.NaN()}
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
			case "pss":
				s.PSS = v
			case "cgroup_usage":
				s.CgroupUsage = v
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

// Writer writes a trace CSV with every column: Header, then Extras.
type Writer struct {
	w   *bufio.Writer
	buf []byte
	err error
}

// NewWriter writes the header to w and returns a Writer for the rows; call
// Flush at the end.
func NewWriter(w io.Writer) *Writer {
	tw := &Writer{w: bufio.NewWriter(w)}
	_, tw.err = tw.w.WriteString(Header + "," + strings.Join(Extras, ",") + "\n")
	return tw
}

// Write writes one row. t is written with the fewest digits that read back
// as the same number, so is every figure (bytes are whole numbers below
// 2^53, written as integers); NaN, infinite and negative figures are
// absent: empty cells.
func (w *Writer) Write(r Row) error {
	if w.err != nil {
		return w.err
	}
	if math.IsNaN(r.T) || math.IsInf(r.T, 0) || r.T < 0 {
		w.err = fmt.Errorf("trace: row time %g is not a finite, non-negative number of seconds", r.T)
		return w.err
	}
	b := strconv.AppendFloat(w.buf[:0], r.T, 'f', -1, 64)
	step := math.NaN()
	if r.Step >= 0 {
		step = float64(r.Step)
	}
	for _, v := range [...]float64{r.Allocated, r.Reserved, r.Used, r.Total, r.RSS, r.PSS, r.Limit, r.CgroupUsage,
		step, r.InactiveSplit, r.AllocRetries} {
		b = append(b, ',')
		if !math.IsNaN(v) && !math.IsInf(v, 0) && v >= 0 {
			b = strconv.AppendFloat(b, v, 'f', -1, 64)
		}
	}
	b = append(b, '\n')
	w.buf = b
	_, w.err = w.w.Write(b)
	return w.err
}

// Flush writes what is buffered and returns the first error met.
func (w *Writer) Flush() error {
	if w.err != nil {
		return w.err
	}
	w.err = w.w.Flush()
	return w.err
}
