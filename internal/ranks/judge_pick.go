// What Judge reads of each rank: which process is each rank (pickRanks, spawnOrder)
// and which output lines are its (attribute).

package ranks

import (
	"sort"
	"strings"

	"github.com/vramguard/vramguard/internal/diagnose"
)

// pickRanks keeps one process per rank: the one that joined the process
// group (the probe's torch.distributed view), else the topmost process with
// that rank (a DataLoader worker inherits its rank's environment). Only the
// most specific kind of identity counts: torchrun under srun gives its
// agent SLURM_PROCID and its workers RANK.
func pickRanks(procs []Process) []*rankState {
	tier := func(src string) int {
		switch src {
		case SourceTorch, SourceTorchrun, SourceSpawnOrder:
			return 0
		case SourceOpenMPI, SourcePMI:
			return 1
		}
		return 2
	}
	best := 3
	for _, p := range procs {
		best = min(best, tier(p.Identity.Source))
	}
	byPID := map[int]Process{}
	for _, p := range procs {
		byPID[p.PID] = p
	}
	byRank := map[int]*rankState{}
	for _, p := range procs {
		if tier(p.Identity.Source) != best {
			continue
		}
		if parent, ok := byPID[p.PPID]; ok && parent.Identity.Rank == p.Identity.Rank && p.Identity.Source != SourceTorch &&
			tier(parent.Identity.Source) == best {
			continue // a child of the rank: a DataLoader worker, a compile worker
		}
		cur := byRank[p.Identity.Rank]
		if cur == nil || (p.Identity.Source == SourceTorch && cur.p.Identity.Source != SourceTorch) ||
			(p.Identity.Source == cur.p.Identity.Source && p.PID < cur.p.PID && cur.p.Identity.Source != SourceTorch) {
			byRank[p.Identity.Rank] = &rankState{p: p, known: true}
		}
	}
	out := make([]*rankState, 0, len(byRank))
	for _, r := range byRank {
		out = append(out, r)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].p.Identity.Rank < out[b].p.Identity.Rank })
	return out
}

// SourceSpawnOrder is the identity of a child of mp.spawn known by its
// place among its siblings.
const SourceSpawnOrder = "mp.spawn's order"

// spawnOrder finds the ranks of mp.spawn's children that died before their
// probe reported a rank: mp.spawn starts its processes one after another,
// process i the i-th, so a parent with exactly world-size children, whose
// reported ranks are their places in PID order, gives each other child its
// place. Nothing is inferred where that does not hold.
func spawnOrder(procs, unranked []Process) []Process {
	type family struct {
		ranked   []Process
		unranked []Process
		world    int
	}
	fams := map[int]*family{}
	for _, p := range procs {
		if p.Identity.Source != SourceTorch || p.Identity.WorldSize == nil || p.PPID == 0 {
			continue
		}
		f := fams[p.PPID]
		if f == nil {
			f = &family{world: *p.Identity.WorldSize}
			fams[p.PPID] = f
		}
		f.ranked = append(f.ranked, p)
	}
	for _, p := range unranked {
		if f := fams[p.PPID]; f != nil && spawnChild(p.Argv) {
			f.unranked = append(f.unranked, p)
		}
	}
	var out []Process
	for _, f := range fams {
		if len(f.unranked) == 0 || len(f.ranked)+len(f.unranked) != f.world {
			continue
		}
		all := append(append([]Process(nil), f.ranked...), f.unranked...)
		sort.Slice(all, func(a, b int) bool { return all[a].PID < all[b].PID })
		ok := true
		for i, p := range all {
			if p.Identity.Source == SourceTorch && p.Identity.Rank != i {
				ok = false
			}
		}
		if !ok {
			continue
		}
		w := f.world
		for i, p := range all {
			if p.Identity.Source != SourceTorch {
				p.Identity = Identity{Rank: i, WorldSize: &w, Source: SourceSpawnOrder}
				out = append(out, p)
			}
		}
	}
	return out
}

// spawnChild reports whether argv is a child multiprocessing started with
// the spawn method ("-c 'from multiprocessing.spawn import spawn_main; …'
// --multiprocessing-fork"), as mp.spawn starts its processes; its resource
// tracker and forkserver are not.
func spawnChild(argv []string) bool {
	for _, a := range argv {
		if strings.Contains(a, "spawn_main(") {
			return true
		}
	}
	return false
}

// attribute gives each rank the output lines its prefix or a launcher's
// report names. A line that names a local rank ("[default2]:", torchrun's
// local_rank, mp.spawn's process index) goes to the process with that local
// rank, where local ranks are known. A rank that only a report names (its
// process never seen) is added.
func attribute(rs []*rankState, lines []diagnose.Line) []*rankState {
	byRank, byLocal := map[int]*rankState{}, map[int]*rankState{}
	for _, r := range rs {
		byRank[r.p.Identity.Rank] = r
		if l := r.p.Identity.LocalRank; l != nil {
			byLocal[*l] = r
		}
	}
	// a job of one rank (each Slurm task under its own vramguard run):
	// what it printed without a rank's prefix is its own
	var only *rankState
	if len(rs) == 1 {
		only = rs[0]
	}
	for _, l := range lines {
		if l.Rank < 0 {
			if only != nil {
				only.lines = append(only.lines, l)
			}
			continue
		}
		local := strings.HasPrefix(l.Source, "default") || strings.HasPrefix(l.Source, "local_rank") || strings.HasPrefix(l.Source, "mp.spawn")
		r := byRank[l.Rank]
		if local && byLocal[l.Rank] != nil {
			r = byLocal[l.Rank]
		}
		if r == nil && (strings.HasPrefix(l.Source, "mp.spawn") || l.Source == "torchrun root cause") {
			// a rank whose process was not seen, named by its launcher
			from := "mp.spawn's report"
			if l.Source == "torchrun root cause" {
				from = "torchrun's report"
			}
			r = &rankState{p: Process{Identity: Identity{Rank: l.Rank, Source: from}}}
			byRank[l.Rank] = r
			rs = append(rs, r)
		}
		if r == nil {
			continue
		}
		r.lines = append(r.lines, l)
		if e, ok := diagnose.ParseSpawnExit(l.Text); ok && r.p.Exit == nil {
			// how mp.spawn saw it end, where its end was not seen
			x := &Exit{Code: e.Code}
			if e.Signal != "" {
				x = &Exit{Code: -1, Signal: signalNamed(e.Signal)}
			}
			if x.Signal != 0 || e.Signal == "" {
				r.p.Exit, r.p.ExitFrom = x, "mp.spawn's report"
			}
		}
	}
	sort.Slice(rs, func(a, b int) bool { return rs[a].p.Identity.Rank < rs[b].p.Identity.Rank })
	return rs
}
