package cli

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/procfs"
)

func startProc(t *testing.T, name string, args ...string) (*exec.Cmd, killTarget, chan struct{}) {
	t.Helper()
	cmd := exec.Command(name, args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-done })
	p, err := procfs.FS{}.Proc(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return cmd, killTarget{PID: p.PID, StartTicks: p.StartTicks}, done
}

func TestKillEscalates(t *testing.T) {
	ctx := context.Background()
	// A process that ignores SIGTERM needs SIGKILL after the grace period.
	_, stubborn, stubbornDone := startProc(t, "sh", "-c", `trap "" TERM; echo ready; while :; do sleep 0.05; done`)
	_, polite, politeDone := startProc(t, "sleep", "600")
	// Wait until the shell has installed its trap: its child sleep exists.
	deadline := time.Now().Add(10 * time.Second)
	for {
		procs, _ := procfs.FS{}.All()
		if len(procfs.Tree(procs, stubborn.PID)) > 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	res, err := killProcesses(ctx, procfs.FS{}, []killTarget{polite, stubborn}, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Termed) != 1 || res.Termed[0] != polite.PID {
		t.Errorf("ended by SIGTERM: %v, want [%d]", res.Termed, polite.PID)
	}
	if len(res.Killed) != 1 || res.Killed[0] != stubborn.PID {
		t.Errorf("needed SIGKILL: %v, want [%d]", res.Killed, stubborn.PID)
	}
	for name, ch := range map[string]chan struct{}{"sleep": politeDone, "sh": stubbornDone} {
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Errorf("%s still running", name)
		}
	}
}

func TestKillSkipsReusedPID(t *testing.T) {
	_, tgt, done := startProc(t, "sleep", "600")
	tgt.StartTicks++ // the PID now "belongs" to a different process
	res, err := killProcesses(context.Background(), procfs.FS{}, []killTarget{tgt}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Skipped) != 1 {
		t.Fatalf("result %+v, want the target skipped", res)
	}
	select {
	case <-done:
		t.Fatal("a process whose start time did not match was signalled")
	default:
	}
}
