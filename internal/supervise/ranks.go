package supervise

import (
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/vramguard/vramguard/internal/diagnose"
	"github.com/vramguard/vramguard/internal/lazyre"
	"github.com/vramguard/vramguard/internal/ranks"
	"github.com/vramguard/vramguard/internal/sampler"
)

// procSeen is what the samples saw of one process of the job.
type procSeen struct {
	ppid    int
	peakRSS uint64
	peakGPU uint64
	hasGPU  bool
	env     ranks.Env
}

// see records what a reading saw of each process, and watches each for its
// end.
func (a *running) see(info *sampler.TreeInfo) {
	if a.procs == nil {
		a.procs = map[int]*procSeen{}
	}
	for _, r := range info.Procs {
		p := a.procs[r.PID]
		if p == nil {
			if len(a.procs) >= maxWatched {
				continue
			}
			p = &procSeen{ppid: r.PPID}
			a.procs[r.PID] = p
			if a.exits != nil {
				a.exits.watch(r.PID)
			}
		}
		p.peakRSS = max(p.peakRSS, r.RSS)
		if r.GPU > 0 {
			p.peakGPU, p.hasGPU = max(p.peakGPU, r.GPU), true
		}
		if e, ok := info.Env[r.PID]; ok {
			p.env = e
		}
	}
	seen := map[int]bool{}
	for _, r := range info.Procs {
		if r.Rank != nil {
			seen[r.Rank.Rank] = true
		}
	}
	if len(seen) >= 2 && a.mon != nil {
		a.mon.SetDistributed()
	}
	if o := a.s.o; o.Probe != nil {
		m := map[int]*ranks.Identity{}
		for _, p := range o.Probe.Processes() {
			if p.Dist != nil {
				m[p.PID] = p.Dist
			}
		}
		a.rankOf = m
	}
}

// probeRank is the rank torch.distributed gave pid, as its probe reported it.
func (a *running) probeRank(pid int) *ranks.Identity { return a.rankOf[pid] }

var reKilledPID = lazyre.New(`(?i)killed process (\d+)`)

// judgeRanks gives a distributed job's post-mortem its ranks (each one's
// end, reason, peaks, steps and last line) and the rank that failed first,
// whose reason becomes the job's.
func (a *running) judgeRanks(in diagnose.Input, pm *Postmortem) {
	o := a.s.o
	if a.exits == nil {
		return
	}
	// every process is gone (the shim ends them all): their pidfds are
	// readable, the statuses come within a moment
	a.exits.finish(3 * time.Second)
	probed := map[int]ranks.Probed{}
	if o.Probe != nil {
		for _, p := range o.Probe.Processes() {
			probed[p.PID] = p
		}
	}
	host, _ := os.Hostname()
	oomLine := map[int]string{}
	for _, l := range in.KernelOOM {
		if m := reKilledPID.FindStringSubmatch(l); m != nil {
			pid, _ := strconv.Atoi(m[1])
			oomLine[pid] = l
		}
	}
	pids := map[int]bool{}
	for pid := range a.procs {
		pids[pid] = true
	}
	for pid, p := range probed {
		if p.Dist != nil {
			pids[pid] = true
		}
	}
	var procs, unranked []ranks.Process
	for pid := range pids {
		seen := a.procs[pid]
		pr, isProbed := probed[pid]
		var id ranks.Identity
		switch {
		case isProbed && pr.Dist != nil:
			id = *pr.Dist
			if seen != nil && seen.env.Identity != nil {
				// what the environment adds: the local rank, the node
				env := seen.env.Identity
				if id.LocalRank == nil {
					id.LocalRank = env.LocalRank
				}
				id.NodeRank = env.NodeRank
			}
		case seen != nil && seen.env.Identity != nil:
			id = *seen.env.Identity
		}
		p := ranks.Process{PID: pid, Identity: id, Node: host, OOMKill: oomLine[pid]}
		if seen != nil {
			p.PPID, p.PeakHost = seen.ppid, seen.peakRSS
			if seen.hasGPU {
				g := seen.peakGPU
				p.PeakGPU = &g
			}
			if seen.env.Node != "" {
				p.Node = seen.env.Node
			}
			if f := seen.env.ErrorFile; f != "" {
				p.ErrorFile = readErrorFile(f)
			}
		}
		if isProbed {
			p.Argv = pr.Argv
			steps := pr.Steps
			p.Steps, p.LastStep, p.Exception = &steps, pr.LastStep, pr.Exception
			p.PeakHost = max(p.PeakHost, pr.PeakRSS)
			if p.PeakGPU == nil {
				p.PeakGPU = pr.PeakGPU
			}
		}
		if isProbed {
			p.Closed = pr.Ended
		}
		if e := a.exits.get(pid); e != nil {
			p.Ended, p.Exit, p.ExitFrom = e.t, e.status, e.from
			p.PeakHost = max(p.PeakHost, e.maxRSS)
		} else if isProbed && !pr.Ended.IsZero() {
			p.Ended, p.ExitFrom = pr.Ended, "its probe's connection closing"
		}
		if f := a.stackFiles[pid]; f != "" {
			if b, err := os.ReadFile(f); err == nil {
				p.Stacks, p.StackText = f, string(b)
			}
		}
		if id.Source == "" {
			unranked = append(unranked, p)
		} else {
			procs = append(procs, p)
		}
	}
	// with no process of a rank seen, a launcher's report may still name one
	res := ranks.Judge(ranks.Job{Procs: procs, Unranked: unranked, Tail: in.Tail, Input: in, Verdict: pm.Verdict,
		SIGKILLed: a.exits.sigkilled(), KernelNamed: len(oomLine) > 0})
	if res == nil {
		return
	}
	pm.Ranks, pm.RootCause, pm.Verdict = res.Ranks, res.RootCause, res.Verdict
}

// readErrorFile reads the error file torchrun's @record wrote for a worker
// ({"message": {"message": "RuntimeError: …", "extraInfo": {…}}}); nil when
// there is none.
func readErrorFile(path string) *ranks.Report {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.Size() > 4<<20 {
		return nil
	}
	var doc struct {
		Message json.RawMessage `json:"message"`
	}
	if json.NewDecoder(f).Decode(&doc) != nil {
		return nil
	}
	var text string
	var inner struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(doc.Message, &inner) == nil && inner.Message != "" {
		text = inner.Message
	} else if json.Unmarshal(doc.Message, &text) != nil {
		return nil
	}
	text = strings.TrimSpace(text)
	if text == "" {
		return nil
	}
	return &ranks.Report{Text: text, T: st.ModTime(), From: "torchrun's error file " + path}
}
