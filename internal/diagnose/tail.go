package diagnose

import (
	"strconv"
	"strings"

	"github.com/vramguard/vramguard/internal/lazyre"
)

// Line is one line of a job's output as a person reads it: the text with the
// prefixes that launchers, loggers and log collectors put before it removed,
// and the process those prefixes named.
//
// Prefixes read (several may nest, outermost first): ANSI colour codes;
// journald and syslog ("Mon DD HH:MM:SS host python[pid]: ", or the date
// alone as CI logs print it); ISO and Python-logging timestamps
// ("2024-09-11 11:23:11,827 - ", "[2024-02-27T21:35:32Z] ",
// "2025-11-12T11:25:13.4961658Z "), logging's default "ERROR:root:"; a log
// viewer's line number ("[80746] "); PyTorch's and torchrun's rank tags
// ("[rank5]:", "[default0]:", "[gpu187:1]:", "[trainer22|6]:"); Ray's
// "(Worker pid=4009) "; Slurm's "srun --label" ("3: "); docker compose's
// "service | "; pdsh/DeepSpeed's "worker-0: ". The rank tag nearest the text
// gives Rank.
type Line struct {
	// Index is the line's position in the tail given to ReadLines. Two
	// processes' output glued onto one line is split into two Lines with
	// the same Index.
	Index int
	// Text is the line without its prefixes.
	Text string
	// Source names the process that printed the line, as its prefix did
	// ("rank5", "default0", "host python[1234]", "Worker pid=4009",
	// "torchrun root cause"); "" when no prefix named one.
	Source string
	// Rank is the rank a prefix named (for torchrun's "[default0]:" the
	// local rank), or -1.
	Rank int
}

var (
	reANSI = lazyre.New(`\x1b\[[0-9;?]*[A-Za-z]`)
	// a colour code whose escape byte was lost on the way (copied from a
	// web page): "[36m" at the start of a line
	reANSIRemnant = lazyre.New(`^\[\d{1,2}(?:;\d{1,3})*m`)
	// journald / syslog: "Mar 21 02:07:08 gpu-node python3[1234]: "
	reJournald = lazyre.New(`^(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ 0-9]\d \d\d:\d\d:\d\d (\S+) ([^\s\[\]:]+)(?:\[(\d+)\])?: ?`)
	// a bare syslog date, as CI logs print it: "Oct 16 02:07:00 "
	reSyslogDate = lazyre.New(`^(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ 0-9]\d \d\d:\d\d:\d\d `)
	// ISO or logging timestamps, bracketed or not, and the separator after
	// them: "2025-11-12T11:25:13.4961658Z ", "2024-12-04T15:10:37.757329 - ",
	// "[2024-02-27T21:35:32.106313Z] fa88a9df || "
	reTimestamp = lazyre.New(`^\[?\d{4}[-/]\d\d[-/]\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z| ?[+-]\d\d:?\d\d)?\]?(?: - | \| |:? |$)(?:[0-9a-f]{8} \|\| )?`)
	// Python logging's default format: "ERROR:root:", "WARNING:torch.distributed.elastic.multiprocessing.api:"
	reLogging = lazyre.New(`^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):[\w.]*:`)
	// a log viewer's line number: "[80746] "
	reLineNumber = lazyre.New(`^\[\d+\] `)
	reRay        = lazyre.New(`^\(([A-Za-z_][\w.-]*) pid=(\d+)(?:, ip=[\d.]+)?\) `)
	reSrunLabel  = lazyre.New(`^ {0,4}(\d{1,5}): `)
	// the replica number compose puts after a service's name
	reReplica = lazyre.New(`[-_]\d+$`)
	// a c10 log header: "[E ProcessGroupNCCL.cpp:458]"
	reC10Header = lazyre.New(`^\[[IWEF] [\w.]+\.(?:cpp|cc|h|hpp):\d+\]`)
	// an ISO timestamp and " - " at the end of a string (ComfyUI's log)
	reISODash = lazyre.New(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+ - $`)
	// torchrun's failure report: "[0]:" entries with "rank : 1 (local_rank: 1)"
	reReportEntry = lazyre.New(`^\[(\d+)\]:$`)
	reReportRank  = lazyre.New(`^\s+rank\s+: (\d+) \(local_rank: \d+\)`)
)

// ReadLines reads tail (a job's output, oldest line first) the way a person
// reads it: it removes the prefixes each line carries, says which process
// printed it, and splits lines on which two processes' output was glued
// together. Lines in torchrun's failure report ("Root Cause (first observed
// failure)") take the rank that report names, and lines of mp.spawn's report
// of a failed process ("-- Process 2 terminated with the following error:",
// "process 2 terminated with signal SIGKILL") the process index it names.
func ReadLines(tail []string) []Line {
	out := make([]Line, 0, len(tail))
	inReport, reportRank := false, -1
	var spawn spawnReport
	for i, raw := range tail {
		for _, l := range splitLine(i, raw) {
			t := strings.TrimSpace(l.Text)
			switch {
			case t == "Root Cause (first observed failure):" || t == "Failures:":
				inReport, reportRank = true, -1
			case strings.HasPrefix(t, "=========="):
				inReport, reportRank = false, -1
			case inReport && reReportEntry.MatchString(t):
				reportRank = -1
			case inReport && reportRank < 0:
				if m := reReportRank.FindStringSubmatch(l.Text); m != nil {
					reportRank, _ = strconv.Atoi(m[1])
				}
			}
			if inReport && reportRank >= 0 && l.Rank < 0 {
				l.Rank, l.Source = reportRank, "torchrun root cause"
			}
			spawn.read(&l)
			out = append(out, l)
		}
	}
	return out
}

// splitLine strips the prefixes of one raw line and splits it where a second
// writer's output starts.
func splitLine(index int, raw string) []Line {
	if strings.IndexByte(raw, 0x1b) >= 0 {
		raw = reANSI.ReplaceAllString(raw, "")
	}
	raw = strings.TrimRight(raw, "\r")
	var out []Line
	for raw != "" || out == nil {
		l := Line{Index: index, Rank: -1}
		text := stripPrefixes(raw, &l)
		// Another writer's output glued onto this line starts a new Line.
		cut := -1
		if k := gluedAt(text); k > 0 {
			cut = k
		}
		if cut < 0 {
			l.Text = text
			out = append(out, l)
			break
		}
		l.Text = text[:cut]
		out = append(out, l)
		raw = text[cut:]
	}
	return out
}

// gluedAt returns where a second writer's output starts inside text, or -1:
// a rank tag ("[rank0]:"), a Python traceback, a glog header ("W0729
// 12:42:14.712448 "), a c10 log header ("[E ProcessGroupNCCL.cpp:458]") or
// an ISO timestamp followed by " - " (ComfyUI's log), after other text.
func gluedAt(text string) int {
	if len(text) < 2 {
		return -1
	}
	best := -1
	consider := func(k int) {
		if k > 0 && (best < 0 || k < best) && strings.TrimSpace(text[:k]) != "" {
			best = k
		}
	}
	for _, tag := range []string{"[rank", "[default"} {
		if k := strings.Index(text[1:], tag); k >= 0 {
			if _, _, _, ok := rankTag(text[k+1:]); ok {
				consider(k + 1)
			}
		}
	}
	if k := strings.Index(text, "Traceback (most recent call last):"); k > 0 {
		consider(k)
	}
	for k := strings.IndexByte(text, '['); k >= 0 && k+4 < len(text); {
		// "[E ProcessGroupNCCL.cpp:458]"
		if isLevel(text[k+1]) && text[k+2] == ' ' {
			if loc := reC10Header.FindStringIndex(text[k:]); loc != nil && loc[0] == 0 {
				consider(k)
				break
			}
		}
		n := strings.IndexByte(text[k+1:], '[')
		if n < 0 {
			break
		}
		k += n + 1
	}
	if k := glogHeaderAt(text); k > 0 && text[k-1] != '[' {
		// not "[E1206 18:44:12.715298746 ProcessGroupNCCL.cpp:607]": one header
		consider(k)
	}
	if k := strings.Index(text, " - "); k >= 26 {
		if loc := reISODash.FindStringIndex(text[:k+3]); loc != nil {
			consider(loc[0])
		}
	}
	return best
}

func isLevel(c byte) bool { return c == 'I' || c == 'W' || c == 'E' || c == 'F' }

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// glogHeaderAt returns where "X0000 00:00:00.000000" (a glog header: level,
// month and day, time with microseconds) starts in s, or -1. It looks only
// around the colons, which the header's time has.
func glogHeaderAt(s string) int {
	for off := 0; ; {
		p := strings.IndexByte(s[off:], ':')
		if p < 0 {
			return -1
		}
		p += off
		off = p + 1
		i := p - 8 // the level letter before "0000 00:"
		if i < 0 || i+21 > len(s) || !isLevel(s[i]) {
			continue
		}
		t := s[i+1 : i+21]
		if isDigit(t[0]) && isDigit(t[1]) && isDigit(t[2]) && isDigit(t[3]) && t[4] == ' ' &&
			isDigit(t[5]) && isDigit(t[6]) && t[7] == ':' && isDigit(t[8]) && isDigit(t[9]) && t[10] == ':' &&
			isDigit(t[11]) && isDigit(t[12]) && t[13] == '.' && isDigit(t[14]) && isDigit(t[19]) {
			return i
		}
	}
}

// composeName parses docker compose's "service    | " at the start of s:
// a name, spaces, "| ". n is its length. A service's name may hold capitals
// (the Compose spec allows [a-zA-Z0-9._-]); such a name must end in the
// replica's number as compose prints it ("Trainer-1", "proj_Trainer_1"), so
// that "WARNING  | " is not taken for one.
func composeName(s string) (name string, n int, ok bool) {
	sp := strings.IndexByte(s[:min(len(s), 64)], ' ')
	if sp < 1 {
		return "", 0, false
	}
	if lower := strings.ToLower(s[:sp]); !nameChars(lower, "_.-") || (lower != s[:sp] && !reReplica.MatchString(s[:sp])) {
		return "", 0, false
	}
	j := sp
	for j < len(s) && s[j] == ' ' {
		j++
	}
	if j+1 >= len(s) || s[j] != '|' || s[j+1] != ' ' {
		return "", 0, false
	}
	return s[:sp], j + 2, true
}

// pdshHost parses pdsh's (and DeepSpeed's) "worker-0: " at the start of s: a
// lowercase host name with a digit in it (so that "socket.timeout: " is not
// one). n is its length.
func pdshHost(s string) (host string, n int, ok bool) {
	c := strings.IndexByte(s[:min(len(s), 64)], ':')
	if c < 2 || c+1 >= len(s) || s[c+1] != ' ' || !(s[0] >= 'a' && s[0] <= 'z') || !nameChars(s[:c], ".-") ||
		!strings.ContainsAny(s[:c], "0123456789") {
		return "", 0, false
	}
	return s[:c], c + 2, true
}

// nameChars reports whether s holds only lowercase letters, digits and the
// bytes of extra.
func nameChars(s, extra string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || isDigit(c) || strings.IndexByte(extra, c) >= 0) {
			return false
		}
	}
	return true
}

// rankTag parses a rank tag at the start of s: "[" name digits "]:" and one
// optional space, the name a letter then letters, digits or ._:|-
// ("[rank5]:", "[default0]:", "[gpu187:1]:", "[trainer22|6]:"). n is its length.
func rankTag(s string) (source string, rank, n int, ok bool) {
	if len(s) < 5 || s[0] != '[' || !(s[1] >= 'a' && s[1] <= 'z' || s[1] >= 'A' && s[1] <= 'Z') {
		return "", 0, 0, false
	}
	end := strings.IndexByte(s[:min(len(s), 64)], ']')
	if end < 3 || end+1 >= len(s) || s[end+1] != ':' {
		return "", 0, 0, false
	}
	inner := s[1:end]
	j := len(inner)
	for j > 0 && isDigit(inner[j-1]) {
		j--
	}
	if j == len(inner) || len(inner)-j > 6 {
		return "", 0, 0, false
	}
	for i := 0; i < j; i++ {
		c := inner[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || isDigit(c) || strings.IndexByte("_.:|-", c) >= 0) {
			return "", 0, 0, false
		}
	}
	rank, _ = strconv.Atoi(inner[j:])
	n = end + 2
	if n < len(s) && s[n] == ' ' {
		n++
	}
	return inner, rank, n, true
}

// cutFirst cuts from s what the first of res that matches in it matched,
// and everything before (each of res is anchored at the start); false, and
// s as it is, when none matches.
func cutFirst(s string, res ...*lazyre.RE) (string, bool) {
	for _, re := range res {
		if loc := re.FindStringIndex(s); loc != nil {
			return s[loc[1]:], true
		}
	}
	return s, false
}

// stripPrefixes removes the prefixes of s, recording what they name in l.
func stripPrefixes(s string, l *Line) string {
	var ok bool
	for range 6 {
		if s == "" {
			return s
		}
		c := s[0]
		upper, lower := c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z'
		if upper || lower {
			if name, n, ok := composeName(s); ok {
				l.Source = name
				s = s[n:]
				continue
			}
		}
		switch {
		case c == '[':
			if src, rank, n, ok := rankTag(s); ok {
				l.Source, l.Rank = src, rank
				s = s[n:]
				continue
			}
			if s, ok = cutFirst(s, reTimestamp, reLineNumber, reANSIRemnant); ok {
				continue
			}
		case c == '(':
			if m := reRay.FindStringSubmatch(s); m != nil {
				l.Source = m[1] + " pid=" + m[2]
				s = s[len(m[0]):]
				continue
			}
		case c >= '0' && c <= '9', c == ' ':
			if s, ok = cutFirst(s, reTimestamp); ok {
				continue
			}
			if m := reSrunLabel.FindStringSubmatch(s); m != nil {
				l.Rank, _ = strconv.Atoi(m[1])
				l.Source = "task " + m[1]
				s = s[len(m[0]):]
				continue
			}
		case upper:
			if m := reJournald.FindStringSubmatch(s); m != nil {
				l.Source = m[1] + " " + m[2]
				if m[3] != "" {
					l.Source += "[" + m[3] + "]"
				}
				s = s[len(m[0]):]
				continue
			}
			if s, ok = cutFirst(s, reSyslogDate, reLogging); ok {
				continue
			}
		case lower:
			if host, n, ok := pdshHost(s); ok {
				l.Source = host
				s = s[n:]
				continue
			}
		}
		break
	}
	return s
}
