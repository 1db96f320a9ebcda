package probe

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Two real ranks under mp.spawn (gloo): each reports its rank once the
// process group exists, and the rank that raises reports its exception,
// which mp.spawn's child catches itself (no sys.excepthook); the traceback
// mp.spawn prints has no frame of the probe. The Hook folds it per process.
func TestDistributedRanksAndExceptions(t *testing.T) {
	t.Parallel()
	l := listen(t)
	h := NewHook(probeDir(t), l, Options{}, time.Now)
	h.Started(1, 0)
	dir := t.TempDir()
	env := Env(baseEnv(), probeDir(t), Options{Socket: l.Path(), Hz: 5, RunDir: dir})
	r := runPython(t, env, nil, testdata(t, "scripts/dist_spawn.py"), filepath.Join(dir, "store"), filepath.Join(dir, "pid"))
	if r.code != 1 || !strings.Contains(string(r.stderr), "-- Process 1 terminated with the following error:") ||
		!strings.Contains(string(r.stderr), "ValueError: rank one fails") {
		t.Fatalf("exit %d, want mp.spawn's report of process 1:\n%s", r.code, r.stderr)
	}
	// the probe's own files, not the word: a checkout's path may hold it
	if strings.Contains(string(r.stderr), probeDir(t)) || strings.Contains(string(r.stderr), "_probe.py") {
		t.Errorf("the probe is in the job's traceback:\n%s", r.stderr)
	}
	var rep struct {
		PID   int            `json:"pid"`
		Ranks map[string]int `json:"ranks"`
	}
	line := strings.TrimSpace(string(r.stdout))
	if err := json.Unmarshal([]byte(line[strings.LastIndexByte(line, '\n')+1:]), &rep); err != nil {
		t.Fatalf("%v: %q", err, r.stdout)
	}
	// the Hook reads the same listener: wait until every process has gone
	deadline := time.Now().Add(20 * time.Second)
	var procs map[int]bool
	for time.Now().Before(deadline) {
		procs = map[int]bool{}
		for _, p := range h.Processes() {
			if !p.Ended.IsZero() {
				procs[p.PID] = true
			}
		}
		if procs[rep.PID] && procs[rep.Ranks["0"]] && procs[rep.Ranks["1"]] {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	byPID := map[int]int{}
	for i, p := range h.Processes() {
		byPID[p.PID] = i
	}
	all := h.Processes()
	for rank, key := range map[int]string{0: "0", 1: "1"} {
		i, ok := byPID[rep.Ranks[key]]
		if !ok {
			t.Fatalf("rank %d (pid %d) never reported: %+v", rank, rep.Ranks[key], all)
		}
		p := all[i]
		if p.Dist == nil || p.Dist.Rank != rank || p.Dist.WorldSize == nil || *p.Dist.WorldSize != 2 || p.Dist.Source != "torch.distributed" {
			t.Errorf("rank %d: dist %+v", rank, p.Dist)
		}
		if p.Ended.IsZero() || !strings.Contains(strings.Join(p.Argv, " "), "spawn_main(") {
			t.Errorf("rank %d: ended %v argv %q", rank, p.Ended, p.Argv)
		}
		switch {
		case rank == 1 && (p.Exception == nil || p.Exception.Text != "ValueError: rank one fails"):
			t.Errorf("rank 1's exception: %+v", p.Exception)
		case rank == 0 && p.Exception != nil:
			t.Errorf("rank 0 reported an exception: %+v", p.Exception)
		}
	}
	parent := all[byPID[rep.PID]]
	if parent.Dist != nil || parent.Exception == nil || !strings.HasPrefix(parent.Exception.Text, "torch.multiprocessing.spawn.ProcessRaisedException:") {
		t.Errorf("the parent: dist %+v exception %+v", parent.Dist, parent.Exception)
	}
}
