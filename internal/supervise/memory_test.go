package supervise

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/cgroup"
	"github.com/vramguard/vramguard/internal/postmortem"
	"github.com/vramguard/vramguard/internal/sampler"
	"github.com/vramguard/vramguard/internal/timeline"
)

const mib = 1 << 20

func TestMemoryFigures(t *testing.T) {
	t0 := time.Unix(1700000000, 0)
	own := &cgroup.Group{Dir: "/sys/fs/cgroup/vramguard-r-1", Version: 2}
	a := &running{group: own}
	sample := func(s int, rss uint64, pss *uint64, usage uint64) {
		x := timeline.Sample{T: t0.Add(time.Duration(s) * time.Second), RSS: rss, PSS: pss, NProcs: 3,
			CgroupUsage: timeline.U(usage), CgroupLimit: timeline.U(400 * mib), Limit: 400 * mib, LimitSource: "--memory-limit"}
		a.record(&x, &sampler.TreeInfo{LimitCgroup: own.Dir, LimitUsage: usage, CgroupPeak: usage})
	}
	sample(0, 300*mib, timeline.U(120*mib), 150*mib)
	// a sample whose smaps_rollup read failed gives RSS: it must not become
	// the tree peak of a job read as PSS
	sample(1, 330*mib, nil, 160*mib)
	sample(2, 310*mib, timeline.U(140*mib), 170*mib)
	m := a.mem
	if m.TreeFigure != "pss" || m.PeakTree != 140*mib || m.PeakTreeRSS != 330*mib {
		t.Errorf("tree %s %d rss %d", m.TreeFigure, m.PeakTree, m.PeakTreeRSS)
	}
	if m.PeakRSS != 140*mib || m.PeakSource != postmortem.PeakTreePSS {
		t.Errorf("peak %d from %s before the end", m.PeakRSS, m.PeakSource)
	}
	// the end: the kernel's max RSS of one process beats the sampled PSS
	// sum, and the own cgroup's kernel-kept peak beats the samples
	a.final, a.haveFinal = statusMsg{Event: "exit", MaxRSS: 200 * mib}, true
	a.finishMemory(390 * mib)
	m = a.mem
	if m.PeakRSS != 200*mib || m.PeakSource != postmortem.PeakKernelMaxRSS || m.KernelMaxRSS != 200*mib {
		t.Errorf("peak %d from %s, kernel %d", m.PeakRSS, m.PeakSource, m.KernelMaxRSS)
	}
	if m.PeakCgroup != 390*mib || m.LimitPeak != 390*mib || m.Limit != 400*mib || m.LimitSource != "--memory-limit" {
		t.Errorf("cgroup peak %d, limit peak %d of %d (%s)", m.PeakCgroup, m.LimitPeak, m.Limit, m.LimitSource)
	}
	if w := m.PeakWhat(); w != "the kernel's max RSS of its largest process" {
		t.Errorf("peak what %q", w)
	}
	if e := a.lastSampleEvidence(t0.Add(2500 * time.Millisecond)); e != "vramguard's last sample: PSS summed over 3 process(es) 140 MiB, 500ms before the job ended" {
		t.Errorf("last sample evidence %q", e)
	}
}

func TestMemoryFiguresWithoutOwnCgroup(t *testing.T) {
	// the job sits in a cgroup under a limited ancestor: no cgroup figure is
	// the job's, and the limit is measured against the ancestor's charge,
	// sampled, or the kernel's high-water mark where it rose during the
	// attempt (the moment before an OOM kill falls between samples)
	dir := t.TempDir()
	write := func(name string, v uint64) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(strconv.FormatUint(v, 10)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("memory.current", 150*mib)
	write("memory.peak", 152*mib) // set before the job, by someone else
	for _, tt := range []struct {
		peakAtEnd, want uint64
	}{{152 * mib, 150 * mib}, {159 * mib, 159 * mib}} {
		a := &running{}
		x := timeline.Sample{T: time.Unix(1, 0), RSS: 50 * mib, PSS: timeline.U(40 * mib), NProcs: 1, Limit: 160 * mib, LimitSource: "cgroup"}
		a.record(&x, &sampler.TreeInfo{LimitCgroup: dir, LimitUsage: 150 * mib, LimitHighWater: 152 * mib})
		write("memory.peak", tt.peakAtEnd)
		a.finishMemory(0)
		if m := a.mem; m.PeakCgroup != 0 || m.LimitPeak != tt.want || m.LimitCgroup != dir || m.PeakRSS != 40*mib {
			t.Errorf("high-water %d at the end: %+v, want limit peak %d", tt.peakAtEnd, m, tt.want)
		}
	}
}

func TestLabelKernelOOM(t *testing.T) {
	line := "kernel: Memory cgroup out of memory: Killed process 23620 (python3) total-vm:352152kB, anon-rss:255232kB, file-rss:5784kB, shmem-rss:0kB, UID:0 pgtables:576kB oom_score_adj:0"
	want := "the kernel's OOM report: it killed process 23620 (python3), which held anon-rss 249 MiB, file-rss 5.6 MiB, shmem-rss 0 B at the kill (that process alone)"
	if got := labelKernelOOM(line); got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	other := "kernel: oom-kill:constraint=CONSTRAINT_MEMCG,task=python3,pid=23620,uid=0"
	if got := labelKernelOOM(other); got != other {
		t.Errorf("a line without figures changed: %q", got)
	}
}
