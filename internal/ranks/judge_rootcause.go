// Which rank failed first, and which ended because of it: OOM victims, the first
// failure, the stalled rank or straggler, and the collateral.

package ranks

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vramguard/vramguard/internal/diagnose"
	"github.com/vramguard/vramguard/internal/units"
)

// sigkillTie is how close two SIGKILLed processes' ends are seen when the
// kernel killed them together: a process's end is seen once its memory is
// freed, so the OOM killer's victim, the largest, is often seen last.
const sigkillTie = 500 * time.Millisecond

// oomVictims are the ranks taken for the n OOM kills no kernel line named:
// of the first n processes of the job to die of SIGKILL, and the ranks
// that died of it within sigkillTie of them, the n that held the most
// memory (the OOM killer picks the largest); in the order they died where
// their memory is not known.
func oomVictims(rs []*rankState, killed map[int]int, n int) []*rankState {
	var first, cands []*rankState
	for _, r := range rs {
		if i, ok := killed[r.p.PID]; ok && r.p.OOMKill == "" {
			cands = append(cands, r)
			if i < n {
				first = append(first, r)
			}
		}
	}
	if len(first) == 0 {
		return nil
	}
	var out []*rankState
	for _, c := range cands {
		for _, f := range first {
			if d := c.p.Ended.Sub(f.p.Ended); c == f || (!c.p.Ended.IsZero() && !f.p.Ended.IsZero() && d > -sigkillTie && d < sigkillTie) {
				out = append(out, c)
				break
			}
		}
	}
	slices.SortStableFunc(out, func(a, b *rankState) int {
		if a.p.PeakHost != b.p.PeakHost {
			return cmp.Compare(b.p.PeakHost, a.p.PeakHost)
		}
		return cmp.Compare(killed[a.p.PID], killed[b.p.PID])
	})
	return out[:min(n, len(out))]
}

// killedWith: r died of SIGKILL within sigkillTie before root, an OOM
// killer's victim, was seen to end: killed together with it.
func killedWith(r, root *rankState) bool {
	return root.victim && r.p.Exit != nil && r.p.Exit.Signal == syscall.SIGKILL && !r.t.IsZero() && !root.t.IsZero() &&
		root.t.Sub(r.t) < sigkillTie
}

// failed reports whether the rank ended in failure of any kind.
func (r *rankState) failed() bool { return r.kind != kindOK && r.kind != kindNone }

// firstFailure is the rank that failed first: the earliest failure of its
// own (an error, a crash, an OOM kill); without one the earliest rank ended
// from outside or with an unexplained error. Ranks that only read a failure
// elsewhere are never the root cause.
func firstFailure(rs []*rankState) *rankState {
	for _, k := range [][]kind{{kindOwn}, {kindExternal, kindUnknown}} {
		var best *rankState
		for _, r := range rs {
			if !slices.Contains(k, r.kind) {
				continue
			}
			switch {
			case best == nil:
				best = r
			case best.t.IsZero() && !r.t.IsZero():
				best = r
			case !r.t.IsZero() && r.t.Before(best.t):
				best = r
			}
		}
		if best != nil {
			return best
		}
	}
	return nil
}

// collectives are the functions of torch.distributed a stack waits in.
var collectives = []string{"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "barrier", "reduce", "gather", "scatter", "recv", "send", "wait", "monitored_barrier"}

// waitsIn returns the collective a Python stack waits in ("all_reduce"),
// or "" when it waits in none: a frame of torch/distributed.
func waitsIn(stack string) string {
	for _, line := range strings.Split(stack, "\n") {
		t := strings.TrimSpace(line)
		if !strings.HasPrefix(t, "File ") || !strings.Contains(t, "torch/distributed/") {
			continue
		}
		// faulthandler: `File "…/distributed_c10d.py", line 1541 in all_reduce`
		if i := strings.LastIndex(t, " in "); i >= 0 {
			fn := t[i+4:]
			for _, c := range collectives {
				if fn == c {
					return fn
				}
			}
			return fn
		}
	}
	return ""
}

// innermost is the innermost frame of the current thread in a faulthandler
// dump ("File "train.py", line 7 in wait_for_data"), "" when none.
func innermost(stack string) string {
	lines := strings.Split(stack, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "Current thread") && i+1 < len(lines) {
			return strings.TrimSpace(lines[i+1])
		}
	}
	return ""
}

// stoppedRank is the rank of a stalled job that stopped making progress
// while the others wait for it in a collective: the one rank whose stack
// waits in no collective while others' do; else the rank with the fewest
// optimizer steps (the earliest last step among equals), when the ranks'
// counts differ.
func stoppedRank(rs []*rankState) *rankState {
	var waiting, not []*rankState
	for _, r := range rs {
		if r.p.StackText == "" {
			continue
		}
		r.stackIn = waitsIn(r.p.StackText)
		if r.stackIn != "" {
			waiting = append(waiting, r)
		} else {
			not = append(not, r)
		}
	}
	if len(waiting) > 0 && len(not) == 1 {
		return not[0]
	}
	cands := rs
	if len(waiting) > 0 && len(not) > 1 {
		cands = not
	}
	var lo, hi *rankState
	for _, r := range cands {
		if r.p.Steps == nil {
			continue
		}
		if lo == nil || *r.p.Steps < *lo.p.Steps || (*r.p.Steps == *lo.p.Steps && r.p.LastStep.Before(lo.p.LastStep)) {
			lo = r
		}
		if hi == nil || *r.p.Steps > *hi.p.Steps {
			hi = r
		}
	}
	if lo != nil && *lo.p.Steps < *hi.p.Steps {
		return lo
	}
	if len(waiting) > 0 && len(not) > 1 && lo != nil {
		return lo
	}
	return nil
}

// straggler is, in a job whose failed ranks all read a failure elsewhere
// (their collectives timed out), the rank that made the fewest optimizer
// steps, when one made fewer than every other: the rank the others waited
// for. nil when the counts do not single one out.
func straggler(rs []*rankState) *rankState {
	var lo *rankState
	n, tie := 0, false
	for _, r := range rs {
		if r.failed() && r.kind != kindConsequence {
			return nil
		}
		if r.p.Steps == nil {
			continue
		}
		n++
		switch {
		case lo == nil || *r.p.Steps < *lo.p.Steps:
			lo, tie = r, false
		case *r.p.Steps == *lo.p.Steps:
			tie = true
		}
	}
	if n < 2 || tie || lo.p.LastStep.IsZero() {
		return nil
	}
	// the others waited: their counts stood still long before they failed
	// (counts read a moment before a sudden end differ by chance), and
	// the straggler's stopped before theirs
	for _, r := range rs {
		if r == lo || r.p.Steps == nil {
			continue
		}
		if r.p.LastStep.IsZero() || r.t.IsZero() || r.t.Sub(r.p.LastStep) < stragglerWait || !lo.p.LastStep.Before(r.p.LastStep) {
			return nil
		}
	}
	return lo
}

// stragglerWait is how long the other ranks must have made no step before
// they failed for the rank with fewer steps to be the one they waited for:
// collective timeouts are longer (gloo's default 30 minutes, NCCL's 10).
const stragglerWait = 10 * time.Second

// how says how the root cause was found first.
func (r *rankState) how(rs []*rankState, stalled bool) string {
	name := r.name()
	if stalled {
		s := name + " stopped making progress"
		var waiting []string
		var in []string
		for _, o := range rs {
			if o != r && o.stackIn != "" {
				waiting = append(waiting, strconv.Itoa(o.p.Identity.Rank))
				if !strings.Contains(strings.Join(in, ","), o.stackIn) {
					in = append(in, o.stackIn)
				}
			}
		}
		if r.p.StackText != "" && r.stackIn == "" && len(waiting) > 0 {
			verb := "waits"
			if len(waiting) > 1 {
				verb = "wait"
			}
			s += fmt.Sprintf(": its Python stack waits in no collective, while %s %s %s in %s", rankWord(len(waiting)), strings.Join(waiting, ", "), verb, strings.Join(in, ", "))
		} else {
			s += ": it counted the fewest optimizer steps"
		}
		if r.p.Steps != nil {
			s += fmt.Sprintf(" (%s", plural(int(*r.p.Steps), "optimizer step"))
			if !r.p.LastStep.IsZero() {
				s += ", the last at " + clock(r.p.LastStep)
			}
			byCount := map[int64][]string{}
			var counts []int64
			for _, o := range rs {
				if o != r && o.p.Steps != nil {
					if byCount[*o.p.Steps] == nil {
						counts = append(counts, *o.p.Steps)
					}
					byCount[*o.p.Steps] = append(byCount[*o.p.Steps], strconv.Itoa(o.p.Identity.Rank))
				}
			}
			sort.Slice(counts, func(a, b int) bool { return counts[a] < counts[b] })
			for _, c := range counts {
				s += fmt.Sprintf("; %s %s made %d", rankWord(len(byCount[c])), strings.Join(byCount[c], ", "), c)
			}
			s += ")"
		}
		return s
	}
	if !r.known {
		return name + " failed first, as the launcher's report says (its process was not seen)"
	}
	var next *rankState
	for _, o := range rs {
		if o == r || !o.failed() || o.t.IsZero() {
			continue
		}
		if next == nil || o.t.Before(next.t) {
			next = o
		}
	}
	s := name + " failed first"
	if !r.t.IsZero() {
		s += " (at " + clock(r.t)
		if next != nil && !next.t.Before(r.t) {
			s += fmt.Sprintf(", %s before rank %d, the next to fail", next.t.Sub(r.t).Round(time.Millisecond), next.p.Identity.Rank)
		}
		s += ")"
	}
	if r.kind == kindOwn {
		s += ": " + r.v.Reason
		if others := othersOwn(rs, r); others > 0 {
			s += fmt.Sprintf("; %s failed of its own later", plural(others, "other rank"))
		}
	} else {
		s += fmt.Sprintf(": no rank printed a failure of its own, and it was the first to end (%s)", r.v.Reason)
	}
	return s
}

func othersOwn(rs []*rankState, root *rankState) int {
	n := 0
	for _, o := range rs {
		if o != root && o.kind == kindOwn {
			n++
		}
	}
	return n
}

// collateral marks the ranks that ended because of root: they read its
// failure (a collective error, a closed connection), were stopped from
// outside after it, or exited with an error of no reason of their own
// after it. A rank with a failure of its own keeps its reason.
func collateral(rs []*rankState, root *rankState, stalled bool) {
	for _, r := range rs {
		if r == root {
			continue
		}
		var why string
		switch {
		case stalled && r.stackIn != "":
			why = fmt.Sprintf("it waits in %s (its Python stack) for rank %d, which stopped", r.stackIn, root.p.Identity.Rank)
		case stalled && (r.kind == kindExternal || r.kind == kindNone):
			why = fmt.Sprintf("it ended with the job, killed when the job stalled; rank %d stopped first", root.p.Identity.Rank)
		case r.kind == kindConsequence:
			why = fmt.Sprintf("%s (rank %d failed first", consequenceWords(r.dec), root.p.Identity.Rank)
			if !r.t.IsZero() && !root.t.IsZero() && r.t.After(root.t) {
				why += fmt.Sprintf(", %s before", r.t.Sub(root.t).Round(time.Millisecond))
			}
			why += "): " + strings.TrimSpace(r.dec.Text)
		case root.v.Reason == diagnose.HostOOMKilled && r.v.Reason == diagnose.HostOOMKilled && (r.t.IsZero() || root.t.IsZero() || !r.t.Before(root.t)):
			why = fmt.Sprintf("the OOM killer killed it too, after rank %d", root.p.Identity.Rank)
			if !r.t.IsZero() && !root.t.IsZero() {
				why += fmt.Sprintf(" (%s later)", r.t.Sub(root.t).Round(time.Millisecond))
			}
			why += fmt.Sprintf(", while the memory rank %d filled the cgroup with was being freed", root.p.Identity.Rank)
			if r.p.PeakHost > 0 && root.p.PeakHost > 0 {
				why += fmt.Sprintf(" (this rank held at most %s, rank %d %s)", units.FormatBytes(r.p.PeakHost), root.p.Identity.Rank, units.FormatBytes(root.p.PeakHost))
			}
		case (r.kind == kindExternal || r.kind == kindUnknown) && (r.t.IsZero() || root.t.IsZero() || !r.t.Before(root.t) || killedWith(r, root)):
			why = exitWords(r.p.Exit)
			switch {
			case r.t.IsZero() || root.t.IsZero():
			case r.t.Before(root.t):
				why += fmt.Sprintf(" %s before rank %d was seen to end, killed with it (the larger's end is seen once its memory is freed)", root.t.Sub(r.t).Round(time.Millisecond), root.p.Identity.Rank)
			default:
				why += fmt.Sprintf(" %s after rank %d failed", r.t.Sub(root.t).Round(time.Millisecond), root.p.Identity.Rank)
			}
			if r.kind == kindExternal {
				why += ", with no error of its own: the launcher stopping the ranks that were left (mp.spawn, torchrun), or vramguard ending what was left of the job"
			} else {
				why += ", with no error of its own in what vramguard read"
			}
		default:
			continue
		}
		r.out.Reason, r.out.Collateral = diagnose.PeerFailed, true
		r.out.Evidence = append([]string{why}, r.timedExit()...)
	}
}

// allPeers handles a job none of whose ranks failed of its own while some
// read a failure elsewhere: those ranks are collateral of a failure
// vramguard did not see (another node's rank, or one that printed nothing).
func allPeers(rs []*rankState) {
	for _, r := range rs {
		if r.kind == kindConsequence {
			r.out.Reason, r.out.Collateral = diagnose.PeerFailed, true
			r.out.Evidence = append([]string{consequenceWords(r.dec) + ": " + strings.TrimSpace(r.dec.Text)}, r.timedExit()...)
		}
	}
}
