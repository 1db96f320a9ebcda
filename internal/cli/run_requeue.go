package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/vramguard/vramguard/internal/procfs"
	"github.com/vramguard/vramguard/internal/runctl"
	"github.com/vramguard/vramguard/internal/store"
)

// A Slurm job that is requeued (scontrol requeue, a preemption or node
// failure with --requeue) starts again under the same SLURM_JOB_ID with
// SLURM_RESTART_COUNT counting its restarts. Each of its tasks is the same
// run as before, in its next attempt: the run directory's slurmTaskFile
// names the job and task (SLURM_PROCID) a run was started for.
const slurmTaskFile = "slurm-task"

// slurmTask is the job and task this process runs as under Slurm
// ("JOBID.PROCID"), and whether Slurm requeued the job; "" outside Slurm.
func slurmTask(getenv func(string) string) (task string, requeued bool) {
	job := strings.TrimSpace(getenv("SLURM_JOB_ID"))
	if job == "" {
		return "", false
	}
	proc := strings.TrimSpace(getenv("SLURM_PROCID"))
	if proc == "" {
		proc = "0"
	}
	n, _ := strconv.Atoi(strings.TrimSpace(getenv("SLURM_RESTART_COUNT")))
	return job + "." + proc, n > 0
}

// markSlurmTask records the Slurm task of a run started under Slurm.
func markSlurmTask(run *store.Run, getenv func(string) string) {
	if task, _ := slurmTask(getenv); task != "" {
		_ = os.MkdirAll(run.Dir, 0o700)
		_ = os.WriteFile(filepath.Join(run.Dir, slurmTaskFile), []byte(task+"\n"), 0o600)
	}
}

// requeuedRun finds the run an earlier start of this requeued Slurm task
// recorded (the newest with its group, its task and its command, whose
// supervisor is gone) and reopens it; it returns the run and the number of
// its next attempt, or nil when this is no requeued task or no such run
// is recorded here.
func requeuedRun(ctx context.Context, st *store.Store, command []string, getenv func(string) string) (*store.Run, int, error) {
	task, requeued := slurmTask(getenv)
	if !requeued {
		return nil, 0, nil
	}
	job, _, _ := strings.Cut(task, ".")
	runs, err := st.Runs(ctx, 500)
	if err != nil {
		return nil, 0, err
	}
	for _, r := range runs {
		if r.Group != job || !slices.Equal(r.Command, command) {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(r.Dir, slurmTaskFile)); err != nil || strings.TrimSpace(string(b)) != task {
			continue
		}
		if r.Status == store.StatusRunning && runctl.Alive(procfs.FS{}, r.SupervisorPID, r.SupervisorStart) {
			return nil, 0, nil // its supervisor still runs: this is another run
		}
		atts, err := st.Attempts(ctx, r.ID)
		if err != nil {
			return nil, 0, err
		}
		next := 1
		if len(atts) > 0 {
			next = atts[len(atts)-1].N + 1
		}
		me, err := procfs.FS{}.Proc(os.Getpid())
		if err != nil {
			return nil, 0, err
		}
		if err := st.ReopenRun(ctx, r.ID, os.Getpid(), me.StartTicks); err != nil {
			return nil, 0, err
		}
		r.Status, r.SupervisorPID, r.SupervisorStart = store.StatusRunning, os.Getpid(), me.StartTicks
		return r, next, nil
	}
	return nil, 0, nil
}

// requeueNotice is what a requeued task's run says as it continues.
func requeueNotice(r *store.Run, next int, getenv func(string) string) string {
	return fmt.Sprintf("Slurm requeued job %s (restart %s): this is attempt %d of run %s", strings.TrimSpace(getenv("SLURM_JOB_ID")),
		strings.TrimSpace(getenv("SLURM_RESTART_COUNT")), next, r.ID)
}
