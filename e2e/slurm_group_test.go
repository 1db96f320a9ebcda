package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/testbin"
)

// slurmJobScript is the batch script of docs/CLUSTER.md: 4 tasks over 2
// nodes, each task one rank under its own vramguard run, gloo across the
// nodes with rank 0's node as the rendezvous. RUN is how each task starts
// (the state directory shared by the nodes, or each node its own).
const slurmJobScript = `#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
#SBATCH --output=job-%j.out
# rank 0's node is the rendezvous, at its address as Slurm knows it
head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
export MASTER_ADDR=$(scontrol show node "$head" | sed -n 's/.*NodeAddr=\([^ ]*\).*/\1/p')
export MASTER_PORT=${MASTER_PORT:-29500}
RUN
`

// TestSlurmGroupStory: a real two-node Slurm runs the batch script of
// docs/CLUSTER.md, 4 tasks under srun vramguard run --name ranks, and task
// 3 dies mid-training (SIGKILLed, or killed by its --memory-limit). From
// either node, explain --group JOBID --json names rank 3 and the node Slurm
// ran it on as the first failure, and the other three collateral on their
// nodes; no task is renamed and runs shows the job once. The nodes share
// one state directory, or each keeps its own and they share the group
// directory.
func TestSlurmGroupStory(t *testing.T) {
	t.Parallel()
	// the script the docs give is the one submitted here
	doc, err := os.ReadFile("../docs/CLUSTER.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), strings.Replace(slurmJobScript, "RUN", "srun vramguard run --name ranks -- python3 train.py", 1)) {
		t.Errorf("docs/CLUSTER.md does not give the batch script this test submits:\n%s", slurmJobScript)
	}
	c := testbin.StartSlurm(t)
	binDir := filepath.Dir(bin)
	for _, tt := range []struct {
		mode, reason, flags string
	}{
		{mode: "kill", reason: "killed"},
		{mode: "oom", reason: "host_oom_killed", flags: " --memory-limit 1g"},
	} {
		for _, layout := range []string{"shared", "per-node"} {
			t.Run(tt.mode+"/"+layout, func(t *testing.T) {
				work := t.TempDir()
				b, err := os.ReadFile(job("slurm_train.py"))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(work, "train.py"), b, 0o644); err != nil {
					t.Fatal(err)
				}
				state := filepath.Join(work, "state")
				run := "srun vramguard run --name ranks" + tt.flags + " -- python3 train.py"
				env := []string{"VRAMGUARD_HOME=" + state}
				if layout == "per-node" {
					// each node its own state directory, one group directory for all
					run = `srun bash -c 'VRAMGUARD_HOME=` + state + `-$SLURMD_NODENAME exec vramguard run --name ranks` + tt.flags + ` -- python3 train.py'`
					env = []string{"VRAMGUARD_GROUP_DIR=" + filepath.Join(work, "groups")}
				}
				script := strings.Replace(slurmJobScript, "RUN", run, 1)
				// vramguard and the python3 with torch first on the tasks' PATH
				pathDir := filepath.Join(work, "bin")
				if err := os.Mkdir(pathDir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(python, filepath.Join(pathDir, "python3")); err != nil {
					t.Fatal(err)
				}
				saved := c.Env
				c.Env = append(append(append([]string(nil), saved...), "PATH="+binDir+":"+pathDir+":"+os.Getenv("PATH"),
					fmt.Sprintf("MASTER_PORT=%d", testbin.FreePort(t)), "FAIL_RANK=3", "FAIL_MODE="+tt.mode), env...)
				id := c.Sbatch(work, script)
				c.Env = saved
				rec := c.WaitJob(id, 4*time.Minute)
				out, _ := os.ReadFile(filepath.Join(work, "job-"+id+".out"))
				if rec["JobState"] == "COMPLETED" {
					t.Fatalf("job %s completed: task 3 should have failed\n%s", id, tail(string(out), 4000))
				}
				// the node each rank ran on, as the job itself printed it
				tasks := make([]*groupTask, 4)
				for _, m := range regexp.MustCompile(`rank (\d) of 4 on (n\d)`).FindAllStringSubmatch(string(out), -1) {
					r := int(m[1][0] - '0')
					tasks[r] = &groupTask{rank: r, node: m[2]}
				}
				for r, tk := range tasks {
					if tk == nil {
						t.Fatalf("rank %d never said where it runs:\n%s", r, tail(string(out), 4000))
					}
					tk.home = state
					if layout == "per-node" {
						tk.home = state + "-" + tk.node
					}
					tk.env = append(os.Environ(), "VRAMGUARD_HOME="+tk.home)
					if layout == "per-node" {
						tk.env = append(tk.env, "VRAMGUARD_GROUP_DIR="+filepath.Join(work, "groups"))
					}
				}
				if tasks[0].node == tasks[3].node {
					t.Fatalf("ranks 0 and 3 ran on one node (%s): the job did not span the nodes", tasks[0].node)
				}
				if strings.Contains(string(out), "took the name") || strings.Contains(string(out), "already named") {
					t.Errorf("a task's run was renamed:\n%s", tail(string(out), 4000))
				}
				for _, tk := range []*groupTask{tasks[0], tasks[3]} {
					var doc map[string]any
					testbin.Run(t, testbin.Vramguard(t, tk.env, "explain", "--group", id, "--json")).JSON(t, &doc)
					if doc["group"] != id {
						t.Errorf("group %v, want the job's id %s", doc["group"], id)
					}
					checkGroupDoc(t, doc, tt.reason, tasks)
				}
				root := fmt.Sprintf("rank 3 on %s failed first", tasks[3].node)
				if n := strings.Count(string(out), root); n < 3 || !strings.Contains(string(out), "vramguard explain --group "+id) {
					t.Errorf("the collateral tasks' post-mortems name %q %d times, want 3, with explain --group %s:\n%s", root, n, id, tail(string(out), 6000))
				}
				checkGroupRuns(t, tasks, id, func(tk *groupTask) {
					text := testbin.Run(t, testbin.Vramguard(t, tk.env, "runs")).Stdout
					if n := strings.Count(text, "train.py"); n != 1 || !strings.Contains(text, "group "+id) || !strings.Contains(text, "[4 ranks on 2 nodes]") {
						t.Errorf("runs shows the job %d times, want once as group %s of 4 ranks on 2 nodes:\n%s", n, id, text)
					}
				})
			})
		}
	}
}
