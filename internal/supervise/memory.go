package supervise

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/vramguard/vramguard/internal/cgroup"
	"github.com/vramguard/vramguard/internal/lazyre"
	"github.com/vramguard/vramguard/internal/postmortem"
	"github.com/vramguard/vramguard/internal/sampler"
	"github.com/vramguard/vramguard/internal/timeline"
	"github.com/vramguard/vramguard/internal/units"
)

// The memory figures of an attempt (docs/FAILURES.md, "Memory figures"):
//
//   - the tree figure of each sample is PSS summed over the job's live
//     processes: forked DataLoader workers share their parent's pages, and
//     an RSS sum would count those pages once per worker. Where
//     smaps_rollup cannot be read, RSS summed, labelled so.
//   - the kernel's max RSS of each process the shim reaped (ru_maxrss) is a
//     high-water mark the kernel kept between samples, so a job shorter than
//     a sample interval, or a spike between two samples, is not lost.
//   - the peak host memory is the larger of the two; it is never below the
//     largest max RSS the kernel accounted to any one process of the job.
//   - a cgroup figure is the job's own cgroup's (--memory-limit), page cache
//     included, or the limiting cgroup's, named by its path.

// lastSample is the tree figure of the newest sample, to set against the
// kernel's OOM report.
type lastSample struct {
	t      time.Time
	figure uint64
	what   string // "pss" or "rss"
	nprocs int
}

// limitWater follows the kernel's high-water mark of the cgroup whose limit
// binds the job, when that is not the job's own: the mark at the first
// sample and the directory it was read for. A mark higher at the end was
// set during the attempt, so it is the cgroup's peak charge in that time,
// exactly, where samples could miss the moment before an OOM kill.
type limitWater struct {
	dir   string
	start uint64
}

// record folds one sample into the attempt's memory figures.
func (a *running) record(x *timeline.Sample, info *sampler.TreeInfo) {
	m := &a.mem
	tree, what := x.RSS, "rss"
	if x.PSS != nil {
		tree, what = *x.PSS, "pss"
	}
	// One figure for the peak: PSS once any sample had it (a sample that
	// could not read a process's smaps_rollup gives RSS, which would count
	// shared pages again), RSS only for a job never read otherwise.
	switch {
	case x.PSS != nil && m.TreeFigure != "pss":
		m.PeakTree, m.TreeFigure = tree, "pss"
	case x.PSS != nil || m.TreeFigure != "pss":
		m.PeakTree, m.TreeFigure = max(m.PeakTree, tree), what
	}
	m.PeakTreeRSS = max(m.PeakTreeRSS, x.RSS)
	m.PeakProcs = max(m.PeakProcs, x.NProcs)
	if x.CgroupUsage != nil {
		m.PeakCgroup = max(m.PeakCgroup, *x.CgroupUsage, info.CgroupPeak)
	}
	if x.Limit > 0 {
		if x.LimitSource != m.LimitSource || info.LimitCgroup != m.LimitCgroup {
			m.LimitPeak = 0 // another cgroup's charge is another quantity
		}
		m.Limit, m.LimitSource, m.LimitCgroup = x.Limit, x.LimitSource, info.LimitCgroup
		if info.LimitCgroup != "" {
			if a.water.dir != info.LimitCgroup {
				a.water = limitWater{dir: info.LimitCgroup, start: info.LimitHighWater}
			}
			m.LimitPeak = max(m.LimitPeak, info.LimitUsage)
			if info.LimitCgroup == a.ownCgroup() {
				m.LimitPeak = max(m.LimitPeak, info.CgroupPeak)
			}
		}
	}
	if x.GPUUsed != nil {
		m.PeakGPU = max(m.PeakGPU, *x.GPUUsed)
	}
	a.setPeak()
	a.last = lastSample{t: x.T, figure: tree, what: what, nprocs: x.NProcs}
}

// waterVersion tells a v1 memory cgroup directory from a v2 one.
func waterVersion(dir string) int {
	if _, err := os.Stat(filepath.Join(dir, "memory.usage_in_bytes")); err == nil {
		return 1
	}
	return 2
}

// ownCgroup is the directory of the job's own cgroup, "" when none.
func (a *running) ownCgroup() string {
	if a.group != nil {
		return a.group.Dir
	}
	return ""
}

// finishMemory adds what is known only at the end: the kernel's max RSS
// from the shim and the own cgroup's final peak.
func (a *running) finishMemory(cgroupPeak uint64) {
	m := &a.mem
	if a.haveFinal {
		m.KernelMaxRSS = max(m.KernelMaxRSS, a.final.MaxRSS)
	}
	if w := a.water; w.dir != "" && w.dir == m.LimitCgroup && w.dir != a.ownCgroup() {
		if c, err := cgroup.ReadMemory(w.dir, waterVersion(w.dir)); err == nil && c.Peak > w.start {
			m.LimitPeak = max(m.LimitPeak, c.Peak)
		}
	}
	if a.group != nil && cgroupPeak > 0 {
		m.PeakCgroup = max(m.PeakCgroup, cgroupPeak)
		if m.LimitCgroup == a.group.Dir {
			m.LimitPeak = max(m.LimitPeak, cgroupPeak)
		}
	}
	a.setPeak()
}

func (a *running) setPeak() {
	m := &a.mem
	m.PeakRSS, m.PeakSource = m.PeakTree, postmortem.PeakTreePSS
	if m.TreeFigure == "rss" {
		m.PeakSource = postmortem.PeakTreeRSS
	}
	if m.KernelMaxRSS > m.PeakTree || m.PeakTree == 0 {
		m.PeakRSS, m.PeakSource = m.KernelMaxRSS, postmortem.PeakKernelMaxRSS
	}
	if m.PeakRSS == 0 {
		m.PeakSource = ""
	}
}

var (
	reOOMVictim = lazyre.New(`Killed process (\d+) \(([^)]*)\)`)
	reOOMFigure = lazyre.New(`\b(anon-rss|file-rss|shmem-rss):(\d+)kB`)
)

// labelKernelOOM rewrites a kernel log line that reports an OOM kill with
// its figures labelled for what they are: the victim's own resident memory
// at the kill, by kind. Other lines are returned as they are.
func labelKernelOOM(line string) string {
	v := reOOMVictim.FindStringSubmatch(line)
	figs := reOOMFigure.FindAllStringSubmatch(line, -1)
	if v == nil || len(figs) == 0 {
		return line
	}
	parts := make([]string, 0, len(figs))
	for _, f := range figs {
		kb, _ := strconv.ParseUint(f[2], 10, 64)
		parts = append(parts, f[1]+" "+units.FormatBytes(kb*1024))
	}
	return fmt.Sprintf("the kernel's OOM report: it killed process %s (%s), which held %s at the kill (that process alone)",
		v[1], v[2], strings.Join(parts, ", "))
}

// lastSampleEvidence says what the newest sample saw and how long before
// the end, so that it is not read as a contradiction of the kernel's report.
func (a *running) lastSampleEvidence(end time.Time) string {
	l := a.last
	if l.t.IsZero() {
		return ""
	}
	what := "PSS"
	if l.what == "rss" {
		what = "RSS"
	}
	return fmt.Sprintf("vramguard's last sample: %s summed over %d process(es) %s, %s before the job ended",
		what, l.nprocs, units.FormatBytes(l.figure), end.Sub(l.t).Round(10*time.Millisecond))
}
