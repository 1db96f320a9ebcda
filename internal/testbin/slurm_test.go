package testbin

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// TestSlurmRunsATwoNodeJob: the cluster comes up and runs a batch job of
// two tasks, one on each node, as a user submits one: an sbatch script
// whose srun starts the tasks.
func TestSlurmRunsATwoNodeJob(t *testing.T) {
	t.Parallel()
	c := StartSlurm(t)
	work := t.TempDir()
	id := c.Sbatch(work, `#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --output=job-%j.out
srun bash -c 'echo "task $SLURM_PROCID of $SLURM_NTASKS on $SLURMD_NODENAME in job $SLURM_JOB_ID"'
`)
	job := c.WaitJob(id, 60*time.Second)
	if job["JobState"] != "COMPLETED" || job["ExitCode"] != "0:0" {
		t.Fatalf("job %s: %s, exit %s; want COMPLETED 0:0", id, job["JobState"], job["ExitCode"])
	}
	if job["NodeList"] != "n[1-2]" {
		t.Errorf("job %s ran on %s, want n[1-2]", id, job["NodeList"])
	}
	b, err := os.ReadFile(filepath.Join(work, "job-"+id+".out"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	sort.Strings(lines)
	want := []string{"task 0 of 2 on n1 in job " + id, "task 1 of 2 on n2 in job " + id}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("the job's output:\n%s\nwant:\n%s", b, strings.Join(want, "\n"))
	}
	// srun outside a batch script allocates the nodes itself.
	r := c.Srun("-N2", "-n2", "-l", "hostname")
	if r.Code != 0 || strings.Count(r.Stdout, "\n") != 2 {
		t.Errorf("srun -N2 -n2 hostname: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
}
