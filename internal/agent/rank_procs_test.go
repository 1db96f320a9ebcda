package agent

import (
	"encoding/json"
	"strconv"
	"testing"

	"github.com/vramguard/vramguard/internal/testbin"
)

// TestJobProcessRanks: a 2-rank job's processes in /api/v1/jobs carry the
// rank, local rank, world size and node their environments name, in rank
// order (the launcher, with no rank, first; each rank's worker after it,
// with its rank), with the driver's memory of each rank's process.
func TestJobProcessRanks(t *testing.T) {
	job := testbin.StartRankJob(t, "VRAMGUARD_NODE=n1")
	launcher, rank := job.Launcher, job.Rank
	sc := `{"name": "ranks", "duration": "10m",
  "devices": [{"name": "GPU", "uuid": "GPU-0", "total": "80GiB"}, {"name": "GPU", "uuid": "GPU-1", "total": "80GiB"}],
  "processes": [{"pid": "$R0", "device": 0, "memory": "3GiB"}, {"pid": "$R1", "device": 1, "memory": "5GiB"}]}`
	r := newRigEnv(t, sc, Config{Log: discardLog(), Node: "a"}, nil,
		func(k string) string {
			return map[string]string{"R0": strconv.Itoa(rank[0]), "R1": strconv.Itoa(rank[1])}[k]
		})
	r.step(1)
	code, body := r.do("GET", "/api/v1/jobs", r.token, "")
	if code != 200 {
		t.Fatalf("GET /api/v1/jobs: %d %s", code, body)
	}
	var resp struct {
		Jobs []struct {
			Key       string            `json:"key"`
			Processes []json.RawMessage `json:"processes"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal([]byte(body), &resp); err != nil {
		t.Fatal(err)
	}
	type proc struct {
		PID       int    `json:"pid"`
		Role      string `json:"role"`
		GPUBytes  uint64 `json:"gpu_bytes"`
		Rank      *int   `json:"rank"`
		LocalRank *int   `json:"local_rank"`
		WorldSize *int   `json:"world_size"`
		Node      string `json:"node"`
	}
	var procs []proc
	var raw []json.RawMessage
	for _, j := range resp.Jobs {
		var ps []proc
		for _, m := range j.Processes {
			var p proc
			if err := json.Unmarshal(m, &p); err != nil {
				t.Fatal(err)
			}
			ps = append(ps, p)
		}
		for _, p := range ps {
			if p.PID == rank[0] {
				procs, raw = ps, j.Processes
			}
		}
	}
	if procs == nil {
		t.Fatalf("no job holds rank 0 (pid %d): %s", rank[0], body)
	}
	workers := map[int]int{} // worker pid -> its rank
	for r, p := range rank {
		for _, c := range treeOf(t, p)[1:] {
			workers[c] = r
		}
	}
	// the order: processes without a rank, then rank 0, its worker(s), rank 1, its worker(s)
	var want []int
	var got []int
	seenRank := -1
	for i, p := range procs {
		got = append(got, p.PID)
		if p.Rank == nil {
			if seenRank >= 0 {
				t.Errorf("process %d with no rank after rank %d", p.PID, seenRank)
			}
			if _, w := workers[p.PID]; w || p.PID == rank[0] || p.PID == rank[1] {
				t.Errorf("process %d of a rank has no rank: %s", p.PID, raw[i])
			}
			continue
		}
		if *p.Rank < seenRank {
			t.Errorf("rank %d (pid %d) after rank %d", *p.Rank, p.PID, seenRank)
		}
		seenRank = *p.Rank
		if p.WorldSize == nil || *p.WorldSize != 2 || p.LocalRank == nil || *p.LocalRank != *p.Rank {
			t.Errorf("pid %d: %s, want world size 2 and local rank %d", p.PID, raw[i], *p.Rank)
		}
		wantNode := ""
		if *p.Rank == 1 {
			wantNode = "n1"
		}
		if p.Node != wantNode {
			t.Errorf("pid %d: node %q, want %q", p.PID, p.Node, wantNode)
		}
		switch p.PID {
		case rank[*p.Rank]:
			if want := uint64(3+2**p.Rank) << 30; p.GPUBytes != want {
				t.Errorf("rank %d: GPU %d bytes, want %d", *p.Rank, p.GPUBytes, want)
			}
			if i+1 < len(procs) && procs[i+1].Rank != nil && *procs[i+1].Rank == *p.Rank && procs[i+1].PID == rank[*p.Rank] {
				t.Errorf("rank %d twice", *p.Rank)
			}
		default:
			if r, ok := workers[p.PID]; !ok || r != *p.Rank {
				t.Errorf("pid %d labelled rank %d is not a worker of that rank (%v)", p.PID, *p.Rank, workers)
			}
			if p.Role != "worker" || i == 0 || procs[i-1].Rank == nil || *procs[i-1].Rank != *p.Rank {
				t.Errorf("worker %d (role %q) does not follow its rank %d", p.PID, p.Role, *p.Rank)
			}
		}
	}
	for _, r := range []int{0, 1} {
		want = append(want, rank[r])
	}
	for _, w := range want {
		found := false
		for _, p := range procs {
			found = found || p.PID == w && p.Rank != nil
		}
		if !found {
			t.Errorf("rank process %d not listed with its rank: %v", w, got)
		}
	}
	if n := len(workers); len(procs) < 2+n {
		t.Errorf("%d processes listed, want the 2 ranks and their %d workers: %v", len(procs), n, got)
	}
	if procs[0].PID != launcher || procs[0].Rank != nil {
		t.Errorf("the launcher %d (no rank) is not listed first: %v", launcher, got)
	}
}
