package sampler

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/cgroup"
	"github.com/vramguard/vramguard/internal/procfs"
	"github.com/vramguard/vramguard/internal/ranks"
	"github.com/vramguard/vramguard/internal/testbin"
	"github.com/vramguard/vramguard/internal/timeline"
)

// readJob takes a reading of w and returns it with its processes' readings.
func readJob(t *testing.T, w *JobWatch) (timeline.Sample, []ProcReading, TreeInfo) {
	t.Helper()
	x, info, err := w.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var procs []ProcReading
	if err := json.Unmarshal(x.Procs, &procs); err != nil {
		t.Fatal(err)
	}
	return x, procs, info
}

// Each process's rank: from its environment (read once per process), from
// torch.distributed where the probe reported it (which wins, keeping what
// only the environment says), none for a process whose environment names
// none.
func TestTreeRanks(t *testing.T) {
	c := &clock{t: time.Unix(1700000000, 0)}
	files := fixture("max\n", "max\n")
	files["proc/101/environ"] = "PATH=/bin\x00RANK=3\x00LOCAL_RANK=1\x00WORLD_SIZE=8\x00GROUP_RANK=1\x00TORCHELASTIC_ERROR_FILE=/tmp/e/3/error.json\x00"
	files["proc/102/environ"] = "PATH=/bin\x00"
	root := testbin.WriteTree(t, files)
	s, _ := newTreeSampler(t, c, gpuScenario)
	w := 8
	probe := map[int]*ranks.Identity{}
	spec := JobSpec{Root: 100, Main: 101, Proc: procfs.FS{Root: root}, Cgroups: cgroup.Reader{Root: root},
		RankOf: func(pid int) *ranks.Identity { return probe[pid] }}
	job := s.WatchJob(spec)
	read := func() ([]ProcReading, TreeInfo) {
		_, procs, info := readJob(t, job)
		return procs, info
	}
	procs, info := read()
	if r := procs[0].Rank; r == nil || r.Rank != 3 || *r.LocalRank != 1 || *r.WorldSize != 8 || *r.NodeRank != 1 || r.Source != ranks.SourceTorchrun {
		t.Errorf("101's rank from its environment: %+v", r)
	}
	if procs[1].Rank != nil {
		t.Errorf("102 names no rank: %+v", procs[1].Rank)
	}
	if e := info.Env[101]; e.ErrorFile != "/tmp/e/3/error.json" || e.Identity == nil {
		t.Errorf("101's environment: %+v", e)
	}
	// read once per process: a changed file is not read again
	os.WriteFile(filepath.Join(root, "proc/101/environ"), []byte("RANK=5\x00"), 0o644)
	probe[101] = &ranks.Identity{Rank: 3, WorldSize: &w, Source: ranks.SourceTorch}
	procs, _ = read()
	if r := procs[0].Rank; r == nil || r.Source != ranks.SourceTorch || r.Rank != 3 || r.LocalRank == nil || *r.LocalRank != 1 || *r.NodeRank != 1 {
		t.Errorf("101's rank from torch.distributed, with the environment's local and node rank: %+v", r)
	}
}
