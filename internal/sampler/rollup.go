package sampler

import (
	"fmt"
	"runtime"
	"slices"
	"syscall"
	"time"

	"github.com/vramguard/vramguard/internal/procfs"
)

// PSS on a budget. To produce smaps_rollup the kernel walks every resident
// page of the process: 14-25 ms of CPU per GiB resident. Read at every sample, a job holding 64 GiB of host
// memory would cost its supervisor a core. So a JobWatch spends at most
// RollupBudget of the wall time on rollups, and reads a process's:
//
//   - at its first reading, and at every reading after the job's set of
//     processes changed (a fork shares pages, an exit hands them back:
//     every PSS in the tree moves);
//   - otherwise when the budget allows, the longest unread first.
//
// Between reads a process's PSS is its last read plus the change in its RSS
// (stat's) since: pages a process gains are its own until it forks. What
// this misses is sharing that changes outside the job (another process
// mapping the same library pages), until the next read.
//
// At the default 1 s interval the budget reads a job that holds up to
// about 2 GiB at nearly every sample, one of 16 GiB every 4-5 s
// (bench/sampler/rollup.sh).

// RollupBudget is the share of the wall time a JobWatch spends reading
// smaps_rollup.
const RollupBudget = 0.05

// rollupRead is what a JobWatch keeps of a process's last smaps_rollup read.
type rollupRead struct {
	start uint64 // the process's start time: a reused PID is another process
	pss   uint64
	rss   uint64    // stat's RSS just after the read: the base of the estimate
	at    time.Time // r.now's (the budget's clock)
	// sample is the time of the reading it was read for (the sampler's
	// clock, as timeline.Sample.T): ProcReading.PSSReadAt
	sample time.Time
	cost   time.Duration
}

// rollups is a JobWatch's budget and the last read of each process.
type rollups struct {
	now func() time.Time // the real clock: the budget is a share of it
	// measure runs f (a read) and returns the CPU time it took (threadCPU)
	measure func(f func()) time.Duration
	procs   map[int]*rollupRead
	credit  time.Duration
	last    time.Time
	members string // the PIDs of the last reading
}

// plan returns the PIDs of tree whose rollup to read at this reading.
func (r *rollups) plan(tree []procfs.Proc) map[int]bool {
	if r.now == nil {
		r.now = time.Now
	}
	if r.measure == nil {
		r.measure = threadCPU
	}
	if r.procs == nil {
		r.procs = map[int]*rollupRead{}
	}
	now := r.now()
	if !r.last.IsZero() {
		r.credit += time.Duration(RollupBudget * float64(now.Sub(r.last)))
	}
	r.last = now
	members := fmt.Sprint(pids(tree))
	changed := members != r.members
	r.members = members

	read := map[int]bool{}
	var due []*rollupRead
	var costs time.Duration
	byRollup := map[*rollupRead]int{}
	for _, p := range tree {
		if p.State == "Z" {
			continue
		}
		st := r.procs[p.PID]
		if changed || st == nil || st.start != p.StartTicks {
			read[p.PID] = true
			continue
		}
		costs += st.cost
		due = append(due, st)
		byRollup[st] = p.PID
	}
	// what is not spent does not pile up past one read of every process
	r.credit = min(r.credit, max(costs, 10*time.Millisecond))
	slices.SortFunc(due, func(a, b *rollupRead) int { return a.at.Compare(b.at) })
	credit := r.credit
	for _, st := range due {
		if credit < st.cost {
			break
		}
		credit -= st.cost
		read[byRollup[st]] = true
	}
	// forget the processes that left
	if len(r.procs) > len(tree) {
		forgetGone(r.procs, tree)
	}
	return read
}

// read reads p's rollup for the reading at t (the sample's time), charging
// its cost to the budget and keeping it.
func (r *rollups) read(fs procfs.FS, p procfs.Proc, t time.Time) (procfs.Rollup, error) {
	var roll procfs.Rollup
	var err error
	cost := r.measure(func() { roll, err = fs.SmapsRollup(p.PID) })
	r.credit -= cost
	if err != nil || roll.RSS == 0 {
		delete(r.procs, p.PID)
		return roll, err
	}
	// The base of the estimate is stat's RSS just after the read, not the
	// reading's from before it: a worker that took a batch in between
	// would have it counted twice.
	base := roll.RSS
	if q, err := fs.Proc(p.PID); err == nil && q.StartTicks == p.StartTicks {
		base = q.RSSBytes
	}
	r.procs[p.PID] = &rollupRead{start: p.StartTicks, pss: roll.PSS, rss: base, at: r.now(), sample: t, cost: cost}
	return roll, nil
}

// threadCPU runs f on this goroutine's thread, held for it, and returns the
// CPU time (user and system) the thread spent: the kernel's page walk, not
// the wall time a busy machine stretches it to. Where the thread's usage
// cannot be read, the wall time.
func threadCPU(f func()) time.Duration {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var a, b syscall.Rusage
	t0 := time.Now()
	errA := syscall.Getrusage(rusageThread, &a)
	f()
	if errA != nil || syscall.Getrusage(rusageThread, &b) != nil {
		return time.Since(t0)
	}
	cpu := func(u syscall.Rusage) time.Duration {
		return time.Duration(u.Utime.Nano() + u.Stime.Nano())
	}
	return cpu(b) - cpu(a)
}

// rusageThread is RUSAGE_THREAD (Linux 2.6.26), which package syscall does
// not name.
const rusageThread = 1

// estimate is p's PSS from its last read, made for the reading at at, and
// its RSS since; ok is false when it has none.
func (r *rollups) estimate(p procfs.Proc) (pss uint64, at time.Time, ok bool) {
	st := r.procs[p.PID]
	if st == nil || st.start != p.StartTicks {
		return 0, time.Time{}, false
	}
	if p.RSSBytes >= st.rss {
		return st.pss + (p.RSSBytes - st.rss), st.sample, true
	}
	return st.pss - min(st.pss, st.rss-p.RSSBytes), st.sample, true
}

// forgetGone deletes from m, a cache by PID, the processes not in tree.
func forgetGone[V any](m map[int]V, tree []procfs.Proc) {
	live := make(map[int]bool, len(tree))
	for _, p := range tree {
		live[p.PID] = true
	}
	for pid := range m {
		if !live[pid] {
			delete(m, pid)
		}
	}
}

func pids(tree []procfs.Proc) []int {
	out := make([]int, 0, len(tree))
	for _, p := range tree {
		if p.State != "Z" {
			out = append(out, p.PID)
		}
	}
	return out
}
