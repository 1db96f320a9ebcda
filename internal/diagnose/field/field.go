// Package field loads vramguard's field corpus: failure messages users
// posted verbatim in public issue threads, each with its source and the
// verdict vramguard must reach on it (internal/diagnose/testdata/field,
// described in docs/FAILURES.md). Tests replay every message, through the
// classifier and through a real process under `vramguard run`.
package field

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/vramguard/vramguard/internal/diagnose"
)

// Case is one message of the corpus.
type Case struct {
	Name string // the file's name without .txt
	URL  string // the issue thread the text was copied from
	// Class groups cases for the corpus's coverage ("mps-oom",
	// "nccl-launcher", ...).
	Class  string
	Reason string // the reason code vramguard must give
	// Exit is the status the re-enacting process exits with (default 1);
	// Signal, when set, the signal it kills itself with instead.
	Exit   int
	Signal syscall.Signal
	// Rank is the rank the decisive failure must be attributed to, or -1
	// when the case does not say.
	Rank int
	// Exception is the exception type the verdict must name, if set.
	Exception string
	// Evidence holds substrings the verdict's evidence must contain.
	Evidence []string
	// OOM holds the expected numbers, as the message writes them; nil
	// when the reason is not an OOM.
	OOM  map[string]string
	Note string
	// Chunks is the output, in the order the original printed it.
	Chunks []Chunk
}

// Chunk is text written to one stream.
type Chunk struct {
	FD   int    `json:"fd"` // 1 stdout, 2 stderr
	Text string `json:"text"`
}

// Tail returns the output as the supervisor's tail holds it (see
// joblog's Writer.Tail): lines in arrival order, a carriage return ending a
// line too, lines cut at 4 KiB, the last 200.
func (c Case) Tail() []string {
	var lines []string
	var b strings.Builder
	for _, ch := range c.Chunks {
		for i := 0; i < len(ch.Text); i++ {
			switch c := ch.Text[i]; {
			case c == '\n' || c == '\r':
				if b.Len() > 0 || c == '\n' {
					lines = append(lines, b.String())
				}
				b.Reset()
			case b.Len() < 4096:
				b.WriteByte(c)
			}
		}
	}
	if b.Len() > 0 {
		lines = append(lines, b.String())
	}
	if len(lines) > 200 {
		lines = lines[len(lines)-200:]
	}
	return lines
}

// Input is the classifier's input for the case, as the supervisor would
// build it for a process that printed the message and ended as the case says.
func (c Case) Input() diagnose.Input {
	in := diagnose.Input{ExitCode: c.Exit, Tail: c.Tail()}
	if c.Signal != 0 {
		in.ExitCode, in.Signal = -1, c.Signal
	}
	return in
}

const cut = "--8<-- "

var oomKeys = map[string]bool{"backend": true, "tried": true, "gpu": true, "total": true, "free": true, "allocated": true,
	"reserved_unallocated": true, "reserved": true, "process": true, "allowed": true, "private_pool": true, "other": true,
	"processes": true, "library": true, "fragmented": true}

// Load reads every *.txt case in dir, sorted by name.
func Load(dir string) ([]Case, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.txt"))
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	var out []Case
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		c, err := Parse(strings.TrimSuffix(filepath.Base(p), ".txt"), b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no cases in %s", dir)
	}
	return out, nil
}

// Parse reads one case: "key: value" header lines, then the output in
// sections that start with a "--8<-- stderr" or "--8<-- stdout" line.
func Parse(name string, b []byte) (Case, error) {
	c := Case{Name: name, Exit: 1, Rank: -1}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var cur *Chunk
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, cut) {
			fd := 0
			switch strings.TrimSpace(line[len(cut):]) {
			case "stdout":
				fd = 1
			case "stderr":
				fd = 2
			default:
				return c, fmt.Errorf("unknown stream in %q", line)
			}
			c.Chunks = append(c.Chunks, Chunk{FD: fd})
			cur = &c.Chunks[len(c.Chunks)-1]
			continue
		}
		if cur != nil {
			cur.Text += line + "\n"
			continue
		}
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			return c, fmt.Errorf("header line %q is not key: value", line)
		}
		v = strings.TrimSpace(v)
		switch k {
		case "url":
			c.URL = v
		case "class":
			c.Class = v
		case "reason":
			c.Reason = v
		case "exit", "rank":
			n, err := strconv.Atoi(v)
			if err != nil {
				return c, fmt.Errorf("%s: %w", k, err)
			}
			if k == "exit" {
				c.Exit = n
			} else {
				c.Rank = n
			}
		case "signal":
			s, ok := signals[v]
			if !ok {
				return c, fmt.Errorf("unknown signal %q", v)
			}
			c.Signal = s
		case "exception":
			c.Exception = v
		case "evidence":
			c.Evidence = append(c.Evidence, v)
		case "note":
			c.Note += v + " "
		default:
			key, ok := strings.CutPrefix(k, "oom.")
			if !ok || !oomKeys[key] {
				return c, fmt.Errorf("unknown header %q", k)
			}
			if c.OOM == nil {
				c.OOM = map[string]string{}
			}
			c.OOM[key] = v
		}
	}
	if err := sc.Err(); err != nil {
		return c, err
	}
	switch {
	case !strings.HasPrefix(c.URL, "https://github.com/"):
		return c, fmt.Errorf("url %q is not a GitHub thread", c.URL)
	case c.Reason == "" || c.Class == "":
		return c, fmt.Errorf("reason and class are required")
	case len(c.Chunks) == 0 || strings.TrimSpace(c.Chunks[0].Text) == "":
		return c, fmt.Errorf("no message")
	case c.Reason == diagnose.CUDAOOM && c.OOM["backend"] == "":
		return c, fmt.Errorf("an OOM case needs oom.backend")
	case c.Reason != diagnose.CUDAOOM && c.OOM != nil:
		return c, fmt.Errorf("oom.* headers on a %s case", c.Reason)
	}
	return c, nil
}

var signals = map[string]syscall.Signal{"SIGSEGV": syscall.SIGSEGV, "SIGKILL": syscall.SIGKILL, "SIGABRT": syscall.SIGABRT, "SIGBUS": syscall.SIGBUS}

var reAmount = regexp.MustCompile(`^([0-9]+)(?:\.([0-9]+))? ?(bytes|B|KiB|MiB|GiB|TiB)$`)

var binary = map[string]float64{"bytes": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}

// amount reads "12.50 MiB", or a sum or difference of such terms ("10.23
// GiB + 332.28 MiB", "1.51 GiB - 1.46 GiB"), into its value in bytes and the
// rounding its digits allow: half a unit of the last digit written, summed
// over the terms.
func amount(s string) (v, tol float64, err error) {
	for _, part := range splitTerms(s) {
		m := reAmount.FindStringSubmatch(strings.TrimSpace(part.text))
		if m == nil {
			return 0, 0, fmt.Errorf("%q is not an amount such as 12.50 MiB (binary units only)", part.text)
		}
		f, _ := strconv.ParseFloat(m[1]+"."+m[2]+"0", 64)
		unit := binary[m[3]]
		v += part.sign * f * unit
		tol += 0.5 * math.Pow(10, -float64(len(m[2]))) * unit
	}
	return v, tol, nil
}

type term struct {
	sign float64
	text string
}

// splitTerms splits "a + b - c" at the operators surrounded by spaces.
func splitTerms(s string) []term {
	out := []term{{sign: 1}}
	for _, f := range strings.Split(s, " ") {
		switch f {
		case "+":
			out = append(out, term{sign: 1})
		case "-":
			out = append(out, term{sign: -1})
		default:
			out[len(out)-1].text += f + " "
		}
	}
	return out
}

// CheckOOM compares the parsed numbers with the case's: every number the
// case lists must be there within the rounding of the message's own digits,
// and every number it does not list must be absent.
func (c Case) CheckOOM(o *diagnose.OOM) []string {
	var bad []string
	if o == nil {
		return []string{"no oom object"}
	}
	num := func(key string, got *uint64) {
		want, listed := c.OOM[key]
		switch {
		case !listed && got != nil:
			bad = append(bad, fmt.Sprintf("oom.%s = %d, but the message has no such number", key, *got))
		case listed && got == nil:
			bad = append(bad, fmt.Sprintf("oom.%s missing, want %s", key, want))
		case listed:
			v, tol, err := amount(want)
			if err != nil {
				bad = append(bad, err.Error())
			} else if math.Abs(float64(*got)-v) > tol+0.5 {
				bad = append(bad, fmt.Sprintf("oom.%s = %d, want %s (%.0f ± %.0f)", key, *got, want, v, tol))
			}
		}
	}
	if o.Backend != c.OOM["backend"] {
		bad = append(bad, fmt.Sprintf("oom.backend = %q, want %q", o.Backend, c.OOM["backend"]))
	}
	num("tried", o.TriedBytes)
	num("total", o.TotalBytes)
	num("free", o.FreeBytes)
	num("allocated", o.AllocatedBytes)
	num("reserved_unallocated", o.ReservedUnallocatedBytes)
	num("reserved", o.ReservedBytes)
	num("process", o.ProcessBytes)
	num("allowed", o.AllowedBytes)
	num("private_pool", o.PrivatePoolBytes)
	num("other", o.OtherBytes)
	gpu, listed := c.OOM["gpu"]
	switch {
	case !listed && o.GPU != nil:
		bad = append(bad, fmt.Sprintf("oom.gpu = %d, but the message names no GPU", *o.GPU))
	case listed && (o.GPU == nil || strconv.Itoa(*o.GPU) != gpu):
		bad = append(bad, fmt.Sprintf("oom.gpu = %v, want %s", o.GPU, gpu))
	}
	var procs []string
	for _, p := range o.Processes {
		procs = append(procs, fmt.Sprintf("%d=%d", p.PID, p.Bytes))
	}
	if want := c.OOM["processes"]; want != "" || len(procs) > 0 {
		var wantProcs []string
		for _, w := range strings.Split(want, ",") {
			pid, amt, ok := strings.Cut(strings.TrimSpace(w), "=")
			if !ok {
				bad = append(bad, fmt.Sprintf("oom.processes entry %q is not pid=amount", w))
				continue
			}
			v, tol, err := amount(amt)
			if err != nil {
				bad = append(bad, err.Error())
				continue
			}
			wantProcs = append(wantProcs, pid)
			found := false
			for _, p := range o.Processes {
				if strconv.Itoa(p.PID) == pid && math.Abs(float64(p.Bytes)-v) <= tol+0.5 {
					found = true
				}
			}
			if !found {
				bad = append(bad, fmt.Sprintf("oom.processes %v lacks %s=%s", procs, pid, amt))
			}
		}
		if len(wantProcs) != len(o.Processes) {
			bad = append(bad, fmt.Sprintf("oom.processes %v, want %s", procs, want))
		}
	}
	if o.Library != c.OOM["library"] {
		bad = append(bad, fmt.Sprintf("oom.library = %q, want %q", o.Library, c.OOM["library"]))
	}
	if want, ok := c.OOM["fragmented"]; ok && strconv.FormatBool(o.Fragmented) != want {
		bad = append(bad, fmt.Sprintf("oom.fragmented = %v, want %s", o.Fragmented, want))
	}
	return bad
}

// CheckVerdict compares a verdict with the case: reason, exception type,
// evidence, the rank the evidence names, and the OOM numbers.
func (c Case) CheckVerdict(v diagnose.Verdict) []string {
	var bad []string
	if v.Reason != c.Reason {
		return []string{fmt.Sprintf("reason %s, want %s; evidence %q", v.Reason, c.Reason, v.Evidence)}
	}
	ev := strings.Join(v.Evidence, "\n")
	if c.Exception != "" && v.ExceptionType != c.Exception {
		bad = append(bad, fmt.Sprintf("exception_type %q, want %q", v.ExceptionType, c.Exception))
	}
	for _, e := range c.Evidence {
		if !strings.Contains(ev, e) {
			bad = append(bad, fmt.Sprintf("no evidence mentions %q: %q", e, v.Evidence))
		}
	}
	if c.Rank >= 0 && !strings.Contains(ev, fmt.Sprintf("rank %d", c.Rank)) {
		bad = append(bad, fmt.Sprintf("evidence does not name rank %d: %q", c.Rank, v.Evidence))
	}
	if c.Reason == diagnose.CUDAOOM {
		bad = append(bad, c.CheckOOM(v.OOM)...)
	}
	return bad
}
