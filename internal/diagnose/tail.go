package diagnose

import (
	"regexp"
	"strconv"
	"strings"
)

// Line is one line of a job's output as a person reads it: the text with the
// prefixes that launchers, loggers and log collectors put before it removed,
// and the process those prefixes named.
//
// Prefixes read (several may nest, outermost first): ANSI colour codes;
// journald and syslog ("Mon DD HH:MM:SS host python[pid]: "); ISO and
// Python-logging timestamps ("2024-09-11 11:23:11,827 - ", "[2024-02-27T21:35:32Z] "),
// a log viewer's line number ("[80746] "); PyTorch's and torchrun's rank tags
// ("[rank5]:", "[default0]:", "[gpu187:1]:", "[trainer22|6]:"); Ray's
// "(Worker pid=4009) "; Slurm's "srun --label" ("3: "); docker compose's
// "service | "; pdsh/DeepSpeed's "worker-0: ". The rank tag nearest the text
// gives Rank.
type Line struct {
	// Index is the line's position in the tail given to ReadTail. Two
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
	reANSI = regexp.MustCompile(`\x1b\[[0-9;?]*[A-Za-z]`)
	// a colour code whose escape byte was lost on the way (copied from a
	// web page): "[36m" at the start of a line
	reANSIRemnant = regexp.MustCompile(`^\[\d{1,2}(?:;\d{1,3})*m`)
	// journald / syslog: "Mar 21 02:07:08 gpu-node python3[1234]: "
	reJournald = regexp.MustCompile(`^(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ 0-9]\d \d\d:\d\d:\d\d (\S+) ([^\s\[\]:]+)(?:\[(\d+)\])?: ?`)
	// a bare syslog date, as CI logs print it: "Oct 16 02:07:00 "
	reSyslogDate = regexp.MustCompile(`^(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ 0-9]\d \d\d:\d\d:\d\d `)
	// ISO or logging timestamps, bracketed or not, and the separator after
	// them: "2025-11-12T11:25:13.4961658Z ", "2024-12-04T15:10:37.757329 - ",
	// "[2024-02-27T21:35:32.106313Z] fa88a9df || "
	reTimestamp = regexp.MustCompile(`^\[?\d{4}[-/]\d\d[-/]\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z| ?[+-]\d\d:?\d\d)?\]?(?: - | \| |:? |$)(?:[0-9a-f]{8} \|\| )?`)
	// Python logging's default format: "ERROR:root:", "WARNING:torch.distributed.elastic.multiprocessing.api:"
	reLogging = regexp.MustCompile(`^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):[\w.]*:`)
	// a log viewer's line number: "[80746] "
	reLineNumber = regexp.MustCompile(`^\[\d+\] `)
	// rank tags: "[rank5]:", "[default0]:", "[gpu187:1]:", "[trainer22|6]:"
	reRankTag = regexp.MustCompile(`^\[([A-Za-z][\w.:|-]*?)(\d+)\]: ?`)
	// the same anywhere in a line: where another process's output starts
	reRankTagInside = regexp.MustCompile(`\[(?:rank|default)\d+\]:`)
	reRay           = regexp.MustCompile(`^\(([A-Za-z_][\w.-]*) pid=(\d+)(?:, ip=[\d.]+)?\) `)
	reSrunLabel     = regexp.MustCompile(`^ {0,4}(\d{1,5}): `)
	reCompose       = regexp.MustCompile(`^([a-z0-9][\w.-]*) +\| `)
	rePdsh          = regexp.MustCompile(`^([a-z][a-z0-9-]*\d[a-z0-9.-]*): `)
	// where a second writer's line starts in the middle of a line: a glog
	// header ("W0729 12:42:14.712448 ", "F0327 14:22:53.846107 "), a
	// c10 log header ("[E ProcessGroupNCCL.cpp:458]"), a Python traceback
	// or an ISO timestamp followed by " - " (ComfyUI's log)
	reGlued = regexp.MustCompile(`[IWEF]\d{4} \d\d:\d\d:\d\d\.\d{6}|\[[IWEF] [\w.]+\.(?:cpp|cc|h|hpp):\d+\]|Traceback \(most recent call last\):|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+ - `)
	// torchrun's failure report: "[0]:" entries with "rank : 1 (local_rank: 1)"
	reReportEntry = regexp.MustCompile(`^\[(\d+)\]:$`)
	reReportRank  = regexp.MustCompile(`^\s+rank\s+: (\d+) \(local_rank: \d+\)`)
)

// ReadLines reads tail (a job's output, oldest line first) the way a person
// reads it: it removes the prefixes each line carries, says which process
// printed it, and splits lines on which two processes' output was glued
// together. Lines in torchrun's failure report ("Root Cause (first observed
// failure)") take the rank that report names.
func ReadLines(tail []string) []Line {
	out := make([]Line, 0, len(tail))
	inReport, reportRank := false, -1
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

// gluedAt returns where a second writer's output starts inside text, or -1.
func gluedAt(text string) int {
	best := -1
	if strings.Contains(text, "]:") {
		if loc := reRankTagInside.FindStringIndex(text); loc != nil && loc[0] > 0 {
			best = loc[0]
		}
	}
	if strings.Contains(text, ":") {
		for _, loc := range reGlued.FindAllStringIndex(text, 4) {
			// "[E1206 18:44:12.715298746 ProcessGroupNCCL.cpp:607]" is one
			// header, not a glog header glued after a "["
			if loc[0] > 0 && text[loc[0]-1] != '[' && strings.TrimSpace(text[:loc[0]]) != "" {
				if best < 0 || loc[0] < best {
					best = loc[0]
				}
				break
			}
		}
	}
	return best
}

// stripPrefixes removes the prefixes of s, recording what they name in l.
func stripPrefixes(s string, l *Line) string {
	for range 6 {
		if s == "" {
			return s
		}
		switch c := s[0]; {
		case c == '[':
			if m := reRankTag.FindStringSubmatch(s); m != nil {
				l.Rank, _ = strconv.Atoi(m[2])
				l.Source = strings.TrimRight(m[1], ":|") + m[2]
				if strings.HasSuffix(m[1], ":") || strings.HasSuffix(m[1], "|") {
					l.Source = m[1] + m[2]
				}
				s = s[len(m[0]):]
				continue
			}
			if loc := reTimestamp.FindStringIndex(s); loc != nil {
				s = s[loc[1]:]
				continue
			}
			if loc := reLineNumber.FindStringIndex(s); loc != nil {
				s = s[loc[1]:]
				continue
			}
			if loc := reANSIRemnant.FindStringIndex(s); loc != nil {
				s = s[loc[1]:]
				continue
			}
		case c == '(':
			if m := reRay.FindStringSubmatch(s); m != nil {
				l.Source = m[1] + " pid=" + m[2]
				s = s[len(m[0]):]
				continue
			}
		case c >= '0' && c <= '9', c == ' ':
			if loc := reTimestamp.FindStringIndex(s); loc != nil {
				s = s[loc[1]:]
				continue
			}
			if m := reSrunLabel.FindStringSubmatch(s); m != nil {
				l.Rank, _ = strconv.Atoi(m[1])
				l.Source = "task " + m[1]
				s = s[len(m[0]):]
				continue
			}
		case c >= 'A' && c <= 'Z':
			if m := reJournald.FindStringSubmatch(s); m != nil {
				l.Source = m[1] + " " + m[2]
				if m[3] != "" {
					l.Source += "[" + m[3] + "]"
				}
				s = s[len(m[0]):]
				continue
			}
			if loc := reSyslogDate.FindStringIndex(s); loc != nil {
				s = s[loc[1]:]
				continue
			}
			if loc := reLogging.FindStringIndex(s); loc != nil {
				s = s[loc[1]:]
				continue
			}
		case c >= 'a' && c <= 'z':
			if m := reCompose.FindStringSubmatch(s); m != nil {
				l.Source = m[1]
				s = s[len(m[0]):]
				continue
			}
			if m := rePdsh.FindStringSubmatch(s); m != nil {
				l.Source = m[1]
				s = s[len(m[0]):]
				continue
			}
		}
		break
	}
	return s
}
