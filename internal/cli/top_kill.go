package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/vramguard/vramguard/internal/procfs"
)

// killTarget is a process to kill, pinned by its start time so a PID reused
// since the screen was drawn is never signalled.
type killTarget struct {
	PID        int
	StartTicks uint64
}

// killResult says what happened to each target.
type killResult struct {
	Termed, Killed, Gone, Skipped []int
}

func (r killResult) String() string {
	var parts []string
	if len(r.Termed) > 0 {
		parts = append(parts, fmt.Sprintf("%v ended after SIGTERM", r.Termed))
	}
	if len(r.Killed) > 0 {
		parts = append(parts, fmt.Sprintf("%v needed SIGKILL", r.Killed))
	}
	if len(r.Gone) > 0 {
		parts = append(parts, fmt.Sprintf("%v had already exited", r.Gone))
	}
	if len(r.Skipped) > 0 {
		parts = append(parts, fmt.Sprintf("%v skipped (PID now belongs to another process)", r.Skipped))
	}
	return strings.Join(parts, "; ")
}

// alive reports whether t still runs (a zombie counts as ended) and is the
// same process (start time unchanged).
func killAlive(fs procfs.FS, t killTarget) (running, same bool) {
	p, err := fs.Proc(t.PID)
	if err != nil {
		return false, true
	}
	if p.StartTicks != t.StartTicks {
		return false, false
	}
	return p.State != "Z" && p.State != "X", true
}

// killProcesses sends SIGTERM to every target, waits up to grace for them to
// exit, then sends SIGKILL to those left and waits for them briefly.
func killProcesses(ctx context.Context, fs procfs.FS, targets []killTarget, grace time.Duration) (killResult, error) {
	var res killResult
	var live []killTarget
	for _, t := range targets {
		running, same := killAlive(fs, t)
		switch {
		case !same:
			res.Skipped = append(res.Skipped, t.PID)
		case !running:
			res.Gone = append(res.Gone, t.PID)
		default:
			if err := syscall.Kill(t.PID, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
				return res, fmt.Errorf("SIGTERM %d: %w", t.PID, err)
			}
			live = append(live, t)
		}
	}
	left := waitGone(ctx, fs, live, grace)
	for _, t := range live {
		if !containsTarget(left, t) {
			res.Termed = append(res.Termed, t.PID)
		}
	}
	for _, t := range left {
		if err := syscall.Kill(t.PID, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return res, fmt.Errorf("SIGKILL %d: %w", t.PID, err)
		}
		res.Killed = append(res.Killed, t.PID)
	}
	if still := waitGone(ctx, fs, left, 2*time.Second); len(still) > 0 {
		return res, fmt.Errorf("processes %v still running after SIGKILL", pidsOf(still))
	}
	return res, nil
}

// waitGone polls until every target has exited or d has passed; it returns
// those still running.
func waitGone(ctx context.Context, fs procfs.FS, ts []killTarget, d time.Duration) []killTarget {
	deadline := time.Now().Add(d)
	for {
		var left []killTarget
		for _, t := range ts {
			if running, same := killAlive(fs, t); running && same {
				left = append(left, t)
			}
		}
		if len(left) == 0 || !time.Now().Before(deadline) {
			return left
		}
		select {
		case <-ctx.Done():
			return left
		case <-time.After(50 * time.Millisecond):
		}
		ts = left
	}
}

func containsTarget(ts []killTarget, t killTarget) bool {
	for _, x := range ts {
		if x == t {
			return true
		}
	}
	return false
}

func pidsOf(ts []killTarget) []int {
	out := make([]int, len(ts))
	for i, t := range ts {
		out[i] = t.PID
	}
	return out
}
