package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/attrib"
	"github.com/vramguard/vramguard/internal/gpu/sim"
	"github.com/vramguard/vramguard/internal/procfs"
	"github.com/vramguard/vramguard/internal/sampler"
	"github.com/vramguard/vramguard/internal/testbin"
)

// TestTopRankRows starts a 2-rank job as torchrun does (a launcher named
// torchrun starting rank 1, then rank 0, with RANK/LOCAL_RANK/WORLD_SIZE
// in their environments, each rank forking workers), gives the ranks GPU
// memory through a scenario, and checks the expanded job's rows as top
// draws them: the launcher, then "rank 0/2", its workers labelled as rank
// 0's, then rank 1 and its workers, at every width; and the ranks in
// top --once --json's processes.
func TestTopRankRows(t *testing.T) {
	rj := testbin.StartRankJob(t)
	rank, launcher, dir := rj.Rank, rj.Launcher, rj.Dir
	scen, err := sim.Parse([]byte(fmt.Sprintf(`{"name": "ranks", "duration": "10m",
  "devices": [{"name": "GPU", "uuid": "GPU-0", "total": "80GiB"}],
  "processes": [{"pid": %d, "device": 0, "memory": "3GiB"}, {"pid": %d, "device": 0, "memory": "5GiB"}]}`, rank[0], rank[1])), os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	c := &topClock{t: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)}
	b := sim.New(scen, sim.WithClock(c.now))
	s, err := sampler.New(sampler.Config{Backend: b, Attributor: &attrib.Attributor{Src: b.Host(procfs.FS{})}, Now: c.now,
		Environ: procfs.FS{}.Environ})
	if err != nil {
		t.Fatal(err)
	}
	smp, err := s.Refresh(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var job *attrib.Job
	for i := range smp.Attrib.Jobs {
		if smp.Attrib.Jobs[i].RootPID == launcher {
			job = &smp.Attrib.Jobs[i]
		}
	}
	if job == nil {
		t.Fatalf("no job rooted at the launcher %d: %+v", launcher, smp.Attrib.Jobs)
	}
	// the rows of the expanded job, in the order and with the labels top draws
	type want struct {
		pid   int
		label string
	}
	wants := []want{{launcher, "└ main: " + filepath.Join(dir, "torchrun")}}
	for r, p := range rank {
		wants = append(wants, want{p, fmt.Sprintf("└ rank %d/2: %s", r, filepath.Join(dir, "python"))})
		for _, w := range testbin.Children(p) {
			wants = append(wants, want{w, fmt.Sprintf("└ rank %d/2 worker: sleep 120", r)})
		}
	}
	for _, width := range []int{200, 120, 80} {
		scr := &topScreen{st: plainStyles(), width: width, smp: &smp, cursor: -1}
		scr.rows = append(scr.rows, topRow{job: job})
		procs := sortProcs(job.Processes, "gpu")
		for k := range procs {
			scr.rows = append(scr.rows, topRow{job: job, proc: &procs[k]})
		}
		_, body, _ := scr.table()
		if len(procs) != len(wants) {
			t.Fatalf("%d processes in the job, want %d: %+v", len(procs), len(wants), procs)
		}
		for i, w := range wants {
			p := procs[i]
			if p.PID != w.pid {
				t.Errorf("width %d: row %d is pid %d, want %d", width, i+1, p.PID, w.pid)
			}
			cells, _ := scr.cells(topRow{job: job, proc: &p}, nil)
			if width == 200 && !strings.HasPrefix(cells[colJob].text(), w.label) {
				t.Errorf("pid %d labelled %q, want %q", p.PID, cells[colJob].text(), w.label)
			}
		}
		text := strings.Join(body, "\n")
		for r, p := range rank {
			line := ""
			for _, l := range body {
				if strings.Contains(l, " "+strconv.Itoa(p)+" ") {
					line = l
				}
			}
			if !strings.Contains(line, "rank "+strconv.Itoa(r)) {
				t.Errorf("width %d: rank %d's row (pid %d) does not say its rank: %q\n%s", width, r, p, line, text)
			}
			if w := cellWidth(line); w > width {
				t.Errorf("width %d: a row of %d cells: %q", width, w, line)
			}
		}
	}
	// top --once --json: each process's rank
	raw, err := json.Marshal(newSnapshot(smp, "", "gpu", "", false))
	if err != nil {
		t.Fatal(err)
	}
	var snap struct {
		Jobs []struct {
			Processes []struct {
				PID       int  `json:"pid"`
				Rank      *int `json:"rank"`
				LocalRank *int `json:"local_rank"`
				WorldSize *int `json:"world_size"`
			} `json:"processes"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal(raw, &snap); err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, j := range snap.Jobs {
		for _, p := range j.Processes {
			for r, rp := range rank {
				if p.PID == rp {
					found++
					if p.Rank == nil || *p.Rank != r || p.LocalRank == nil || *p.LocalRank != r || p.WorldSize == nil || *p.WorldSize != 2 {
						t.Errorf("pid %d in --json: rank %v local %v world %v, want %d %d 2", rp, p.Rank, p.LocalRank, p.WorldSize, r, r)
					}
				}
			}
			if p.PID == launcher && p.Rank != nil {
				t.Errorf("the launcher has rank %d in --json", *p.Rank)
			}
		}
	}
	if found != 2 {
		t.Errorf("%d of the 2 ranks in --json: %s", found, raw)
	}
}
