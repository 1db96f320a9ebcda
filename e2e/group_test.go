package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/vramguard/vramguard/internal/testbin"
)

// groupTask is one Slurm task of a job as srun starts it: its rank, its
// node, and the state directory its node's vramguard run records in.
type groupTask struct {
	rank      int
	node      string
	home      string
	res       result
	groupDir  string // "" : the state directory's groups/
	env       []string
	localRank int
	nodeIndex int
}

// runGroupJob runs a 4-task job over nodes n1 (ranks 0, 1) and n2 (ranks 2,
// 3), each task `vramguard run --name ranks -- python slurm_train.py` with
// the environment srun gives it (SLURM_JOB_ID, SLURM_PROCID, SLURM_NTASKS,
// SLURM_LOCALID, SLURM_NODEID, SLURMD_NODENAME), all at once. homes names
// each node's state directory; groupDir, when set, is the directory the
// nodes share for the group's records.
func runGroupJob(t *testing.T, jobID string, homes map[string]string, groupDir string, env []string, flags ...string) []*groupTask {
	t.Helper()
	port := testbin.FreePort(t)
	var tasks []*groupTask
	for r := 0; r < 4; r++ {
		node, nodeIndex := "n1", 0
		if r >= 2 {
			node, nodeIndex = "n2", 1
		}
		tasks = append(tasks, &groupTask{rank: r, node: node, home: homes[node], groupDir: groupDir, localRank: r % 2, nodeIndex: nodeIndex})
	}
	var wg sync.WaitGroup
	for _, tk := range tasks {
		tk.env = append(os.Environ(), "VRAMGUARD_HOME="+tk.home, "SLURM_JOB_ID="+jobID, fmt.Sprintf("SLURM_PROCID=%d", tk.rank),
			"SLURM_NTASKS=4", "SLURM_NNODES=2", fmt.Sprintf("SLURM_LOCALID=%d", tk.localRank), fmt.Sprintf("SLURM_NODEID=%d", tk.nodeIndex),
			"SLURMD_NODENAME="+tk.node, "MASTER_ADDR=127.0.0.1", fmt.Sprintf("MASTER_PORT=%d", port))
		if groupDir != "" {
			tk.env = append(tk.env, "VRAMGUARD_GROUP_DIR="+groupDir)
		}
		tk.env = append(tk.env, env...)
		args := append([]string{"run", "--name", "ranks", "--sample-interval", "250ms", "--probe-hz", "5"}, flags...)
		args = append(args, "--", python, job("slurm_train.py"))
		wg.Add(1)
		go func(tk *groupTask) {
			defer wg.Done()
			r := testbin.Run(t, testbin.Vramguard(t, tk.env, args...))
			tk.res = result{r.Stdout, r.Stderr, r.Code}
		}(tk)
	}
	wg.Wait()
	return tasks
}

// TestGroupStory: a 4-task job over 2 nodes whose rank 3 (on n2) dies
// mid-training, SIGKILLed or killed by its task's --memory-limit, while
// the others wait for it in an all_reduce and fail when its connection
// closes. explain --group JOBID --json, on either node, names rank 3 on n2
// as the first failure with its own reason, which is the job's, and the
// other three collateral with their nodes right; each collateral task's
// own post-mortem names rank 3 on n2 and the command; no task is renamed,
// and runs shows the job once. The nodes share one state directory, or
// each has its own and they share a group directory.
func TestGroupStory(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		mode, reason string
		flags        []string
	}{
		{mode: "kill", reason: "killed"},
		{mode: "oom", reason: "host_oom_killed", flags: []string{"--memory-limit", "1g"}},
	} {
		for _, layout := range []string{"shared", "per-node"} {
			t.Run(tt.mode+"/"+layout, func(t *testing.T) {
				if tt.mode == "oom" {
					testbin.NeedRoot(t, "a host OOM makes a memory cgroup")
				}
				shared := t.TempDir()
				homes := map[string]string{"n1": shared, "n2": shared}
				groupDir := ""
				if layout == "per-node" {
					homes = map[string]string{"n1": t.TempDir(), "n2": t.TempDir()}
					groupDir = filepath.Join(shared, "groups")
				}
				jobID := "4242"
				tasks := runGroupJob(t, jobID, homes, groupDir, []string{"FAIL_RANK=3", "FAIL_MODE=" + tt.mode}, tt.flags...)
				for _, tk := range tasks {
					if tk.res.code == 0 {
						t.Errorf("rank %d exited 0:\n%s", tk.rank, tail(tk.res.stderr, 2000))
					}
					if strings.Contains(tk.res.stderr, "took the name") || strings.Contains(tk.res.stderr, "already named") {
						t.Errorf("rank %d's run was renamed:\n%s", tk.rank, tail(tk.res.stderr, 2000))
					}
				}
				for _, tk := range []*groupTask{tasks[0], tasks[3]} { // from either node
					var doc map[string]any
					testbin.Run(t, testbin.Vramguard(t, tk.env, "explain", "--group", jobID, "--json")).JSON(t, &doc)
					checkGroupDoc(t, doc, tt.reason, tasks)
				}
				for _, tk := range tasks[:3] {
					se := tk.res.stderr
					if !strings.Contains(se, "rank 3 on n2 failed first") || !strings.Contains(se, "vramguard explain --group 4242") {
						t.Errorf("rank %d's post-mortem does not name rank 3 on n2 and the group's story:\n%s", tk.rank, tail(se, 3000))
					}
					if strings.Contains(se, "Find the rank that failed first") {
						t.Errorf("rank %d's post-mortem still asks the user to find the first failure:\n%s", tk.rank, tail(se, 3000))
					}
				}
				// every run is named ranks; runs shows the job once per state directory
				checkGroupRuns(t, tasks, jobID, func(tk *groupTask) {
					out := testbin.Run(t, testbin.Vramguard(t, append(tk.env, "COLUMNS=200"), "runs")).Stdout
					if n := strings.Count(out, "slurm_train.py"); n != 1 {
						t.Errorf("runs shows the job %d times, want once:\n%s", n, out)
					}
					if !strings.Contains(out, "4 ranks") || !strings.Contains(out, "2 nodes") {
						t.Errorf("runs' line for the job does not say its 4 ranks on 2 nodes:\n%s", out)
					}
					v := testbin.Run(t, testbin.Vramguard(t, append(tk.env, "COLUMNS=200"), "runs", "-v")).Stdout
					for r := 0; r < 4; r++ {
						if !strings.Contains(v, fmt.Sprintf("rank %d ", r)) {
							t.Errorf("runs -v does not list rank %d beneath the job:\n%s", r, v)
						}
					}
				})
				text := testbin.Run(t, testbin.Vramguard(t, tasks[1].env, "explain", "--group", jobID)).Stdout
				if !strings.Contains(text, "first failure: rank 3 on n2") || !strings.Contains(text, "4 ranks on 2 nodes (n1, n2)") {
					t.Errorf("explain --group's text:\n%s", text)
				}
			})
		}
	}
}

// checkGroupRuns checks the runs each state directory of tasks records
// (once a directory): every one is named ranks and is of group; then it
// calls more with the directory's first task, for its own checks.
func checkGroupRuns(t *testing.T, tasks []*groupTask, group string, more func(tk *groupTask)) {
	t.Helper()
	seen := map[string]bool{}
	for _, tk := range tasks {
		if seen[tk.home] {
			continue
		}
		seen[tk.home] = true
		var runs []map[string]any
		testbin.Run(t, testbin.Vramguard(t, tk.env, "runs", "--json")).JSON(t, &runs)
		for _, r := range runs {
			if r["name"] != "ranks" || r["group"] != group {
				t.Errorf("run %v: name %v group %v, want ranks %s", r["id"], r["name"], r["group"], group)
			}
		}
		more(tk)
	}
}

// checkGroupDoc checks explain --group --json of the job runGroupJob ran
// with rank 3 failing: rank 3 on n2 first, with reason; the others
// collateral, each on its node with its own run's PID.
func checkGroupDoc(t *testing.T, doc map[string]any, reason string, tasks []*groupTask) {
	t.Helper()
	b, _ := json.MarshalIndent(doc, "", " ")
	if doc["reason"] != reason {
		t.Errorf("group reason %v, want %s\n%s", doc["reason"], reason, b)
	}
	root, _ := doc["root_cause"].(map[string]any)
	if root == nil || root["rank"] != 3.0 || root["node"] != "n2" || root["reason"] != reason {
		t.Fatalf("root_cause %v, want rank 3 on n2, %s\n%s", doc["root_cause"], reason, b)
	}
	if root["order"] != "evidence" {
		t.Errorf("root_cause.order %v: rank 3 alone failed of its own (the others only saw it go), so the order rests on evidence", root["order"])
	}
	rs, _ := doc["ranks"].([]any)
	if len(rs) != 4 {
		t.Fatalf("%d ranks, want 4\n%s", len(rs), b)
	}
	for i, x := range rs {
		rk := x.(map[string]any)
		if rk["rank"] != float64(i) || rk["node"] != tasks[i].node {
			t.Errorf("ranks[%d]: rank %v node %v, want %d on %s", i, rk["rank"], rk["node"], i, tasks[i].node)
		}
		if pid, _ := rk["pid"].(float64); pid <= 0 {
			t.Errorf("rank %d: pid %v", i, rk["pid"])
		}
		if peak, _ := rk["peak_host_bytes"].(float64); peak < 50<<20 {
			t.Errorf("rank %d: peak_host_bytes %v, less than a process with torch imported holds", i, rk["peak_host_bytes"])
		}
		if _, ok := rk["optimizer_steps"].(float64); !ok {
			t.Errorf("rank %d: no optimizer_steps: %v", i, rk["optimizer_steps"])
		}
		ev := strings.Join(strs(rk["evidence"]), "\n")
		if i == 3 {
			if rk["reason"] != reason || rk["collateral"] != false {
				t.Errorf("rank 3: reason %v collateral %v, want %s, not collateral", rk["reason"], rk["collateral"], reason)
			}
			if s, _ := rk["signal"].(string); s != "SIGKILL" {
				t.Errorf("rank 3: signal %v, want SIGKILL", rk["signal"])
			}
			continue
		}
		if rk["reason"] != "peer_failed" || rk["collateral"] != true || !strings.Contains(ev, "rank 3 on n2 failed first") {
			t.Errorf("rank %d: reason %v collateral %v, want peer_failed naming rank 3 on n2:\n%s", i, rk["reason"], rk["collateral"], ev)
		}
		if !strings.Contains(ev, "peer") && !strings.Contains(ev, "Connection") {
			t.Errorf("rank %d's evidence does not say what it died of (a peer's closed connection):\n%s", i, ev)
		}
	}
}
