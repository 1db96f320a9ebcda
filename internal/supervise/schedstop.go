package supervise

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/vramguard/vramguard/internal/diagnose"
	"github.com/vramguard/vramguard/internal/kubepod"
	"github.com/vramguard/vramguard/internal/procfs"
)

// noteStop records the signal that ends the job for diagnose (Input.Stop):
// when it came, whether a person sent it at the terminal, and, under
// Slurm, the job's end time and the step daemon among the supervisor's
// ancestors (the one process that signals a task of a step at its time
// limit or on scancel).
func (a *running) noteStop(sig syscall.Signal, terminal bool) {
	o := a.s.o
	getenv := envLookup(o.Env)
	st := &diagnose.Stop{Signal: sig, FromTerminal: terminal && sig == syscall.SIGINT, At: o.Now()}
	if getenv("SLURM_JOB_ID") != "" && !st.FromTerminal {
		st.Deadline = diagnose.SlurmDeadline(getenv)
		if pid, comm := slurmAncestor(o.Proc); pid > 0 {
			st.SenderPID, st.Sender = pid, comm
		}
	}
	a.stop = st
}

// stopInput is the Stop for diagnose once the attempt ended: with, under
// Slurm, the lines Slurm wrote of the end into the job's output files
// ("*** STEP 12.0 ON n1 CANCELLED AT … DUE TO TIME LIMIT ***"), which
// slurmstepd writes to the step's stderr, not to the task's.
func (a *running) stopInput() *diagnose.Stop {
	if a.stop == nil {
		return nil
	}
	st := *a.stop
	getenv := envLookup(a.s.o.Env)
	if id := getenv("SLURM_JOB_ID"); id != "" && !st.FromTerminal {
		st.Scheduler = slurmEndLines(id, a.s.o.Env)
	}
	if st.Signal == syscall.SIGTERM && !st.FromTerminal {
		if c, ok := kubepod.FromEnv(getenv); ok {
			sched, notes := podEndLines(c, st.At)
			st.Scheduler = append(st.Scheduler, sched...)
			st.Notes = append(st.Notes, notes...)
		}
	}
	return &st
}

// podEndLines reads, in a pod, what the pod says of its end (kubepod):
// read once the job ended, as the pod's DisruptionTarget condition is set
// before the kubelet's SIGTERM. A read that fails is a note, never an error.
func podEndLines(c kubepod.Config, sigAt time.Time) (scheduler, notes []string) {
	p, err := kubepod.Read(context.Background(), c)
	if err != nil {
		return nil, []string{err.Error()}
	}
	return p.Lines(sigAt)
}

// slurmAncestor is the nearest slurmstepd above this process (srun's task,
// or an sbatch script's child), 0 when none.
func slurmAncestor(fs procfs.FS) (int, string) {
	pid := os.Getppid()
	for range 6 {
		if pid <= 1 {
			return 0, ""
		}
		p, err := fs.Proc(pid)
		if err != nil {
			return 0, ""
		}
		if p.Comm == "slurmstepd" {
			return pid, p.Comm
		}
		pid = p.PPID
	}
	return 0, ""
}

// slurmEndLines reads the lines that name a cancellation ("CANCELLED AT")
// in the last 64 KiB of the job's stderr and stdout files, which `scontrol
// show job` names; nil when Slurm cannot be asked (no scontrol, another
// cluster) or the files cannot be read.
func slurmEndLines(jobID string, env []string) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "scontrol", "show", "job", "-o", jobID)
	cmd.Env = env
	out, err := cmd.Output()
	if err != nil {
		return nil
	}
	var files []string
	for _, f := range strings.Fields(string(out)) {
		k, v, ok := strings.Cut(f, "=")
		if ok && (k == "StdErr" || k == "StdOut") && strings.HasPrefix(v, "/") && !containsStr(files, v) {
			files = append(files, v)
		}
	}
	var lines []string
	for _, p := range files {
		lines = append(lines, cancelLines(p)...)
	}
	return lines
}

func cancelLines(path string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	const tail = 64 << 10
	if fi, err := f.Stat(); err == nil && fi.Size() > tail {
		_, _ = f.Seek(fi.Size()-tail, io.SeekStart)
	}
	b, _ := io.ReadAll(io.LimitReader(f, tail))
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), tail)
	for sc.Scan() {
		if l := sc.Text(); strings.Contains(l, "CANCELLED AT") && len(out) < 16 {
			out = append(out, l)
		}
	}
	return out
}

func containsStr(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

// envLookup reads a variable of env (a job's base environment), falling
// back to the process's own when env is nil.
func envLookup(env []string) func(string) string {
	if env == nil {
		return os.Getenv
	}
	return func(k string) string {
		for i := len(env) - 1; i >= 0; i-- {
			if v, ok := strings.CutPrefix(env[i], k+"="); ok {
				return v
			}
		}
		return ""
	}
}
