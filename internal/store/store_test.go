package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// openStore opens the store in dir, closed when the test ends.
func openStore(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// atOnce runs try(0) to try(n-1) in n goroutines at once and returns how
// many returned true.
func atOnce(n int, try func(i int) bool) int {
	var wg sync.WaitGroup
	var won atomic.Int32
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if try(i) {
				won.Add(1)
			}
		}()
	}
	wg.Wait()
	return int(won.Load())
}

func TestRoundTrip(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir())
	t0 := time.UnixMilli(1_700_000_000_000)
	for i, id := range []string{"20240101-000000-aaaa", "20240101-000001-bbbb"} {
		r := &Run{ID: id, Name: "train", Command: []string{"python", "train.py"}, Status: StatusRunning,
			StartedAt: t0.Add(time.Duration(i) * time.Second), SupervisorPID: 100 + i}
		if err := s.CreateRun(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	last, err := s.Resolve(ctx, "last")
	if err != nil || last.ID != "20240101-000001-bbbb" {
		t.Fatalf("last = %+v, %v", last, err)
	}
	byName, err := s.Resolve(ctx, "train")
	if err != nil || byName.ID != "20240101-000001-bbbb" {
		t.Fatalf("by name = %+v, %v", byName, err)
	}
	if _, err := s.Resolve(ctx, "20240101"); err == nil {
		t.Error("ambiguous prefix resolved")
	}
	if r, err := s.Resolve(ctx, "20240101-000000"); err != nil || r.ID != "20240101-000000-aaaa" {
		t.Errorf("prefix: %+v %v", r, err)
	}
	if _, err := s.Resolve(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing run: %v", err)
	}

	a := &Attempt{RunID: last.ID, N: 1, StartedAt: t0, LogPath: "/x/attempt-1.log"}
	if err := s.StartAttempt(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishAttempt(ctx, last.ID, 1, t0.Add(time.Minute), 137, "killed", []byte(`{"reason":"killed"}`)); err != nil {
		t.Fatal(err)
	}
	as, err := s.Attempts(ctx, last.ID)
	if err != nil || len(as) != 1 || as[0].Reason != "killed" || *as[0].ExitCode != 137 {
		t.Fatalf("attempts = %+v, %v", as, err)
	}
	v := uint64(5)
	if err := s.AddSample(ctx, last.ID, &Sample{Attempt: 1, T: t0, RSS: 42, NProcs: 3, GPUUsed: &v}); err != nil {
		t.Fatal(err)
	}
	xs, err := s.Samples(ctx, last.ID)
	if err != nil || len(xs) != 1 || xs[0].RSS != 42 || *xs[0].GPUUsed != 5 || xs[0].CgroupLimit != nil {
		t.Fatalf("samples = %+v, %v", xs, err)
	}
	if err := s.AddEvent(ctx, &Event{RunID: last.ID, Attempt: 1, T: t0, Kind: "restart", Message: "m"}); err != nil {
		t.Fatal(err)
	}
	if es, _ := s.Events(ctx, last.ID); len(es) != 1 || es[0].Kind != "restart" {
		t.Errorf("events = %+v", es)
	}
	if err := s.UpdatePeaks(ctx, last.ID, 10, 3); err != nil {
		t.Fatal(err)
	}
	s.UpdatePeaks(ctx, last.ID, 5, 7)
	r, _ := s.Resolve(ctx, last.ID)
	if r.PeakRSS != 10 || r.PeakGPU != 7 || r.Attempts != 1 {
		t.Errorf("peaks = %d %d attempts %d", r.PeakRSS, r.PeakGPU, r.Attempts)
	}

	// Supervisor 100 is alive, 101 is gone.
	lost, err := s.MarkLost(ctx, func(pid int, _ uint64) bool { return pid == 100 }, t0.Add(time.Hour))
	if err != nil || len(lost) != 1 || lost[0] != last.ID {
		t.Fatalf("lost = %v, %v", lost, err)
	}
	r, _ = s.Resolve(ctx, last.ID)
	if r.Status != StatusLost || r.Reason != "lost" || len(r.Postmortem) == 0 {
		t.Errorf("after MarkLost: %+v", r)
	}
}

// TestReopen checks migrations are idempotent and data survives.
func TestReopenConcurrent(t *testing.T) {
	dir := t.TempDir()
	opened := atOnce(4, func(int) bool {
		s, err := Open(dir)
		if err != nil {
			t.Error(err)
			return false
		}
		s.Close()
		return true
	})
	if opened != 4 {
		t.Errorf("%d of 4 concurrent opens succeeded", opened)
	}
	if _, err := os.Stat(filepath.Join(dir, "vramguard.db")); err != nil {
		t.Fatal(err)
	}
}

// TestCreateRunNamed: a name is given to one run only, however many try it
// at once.
func TestCreateRunNamed(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "v.db"))
	ctx := context.Background()
	won := atOnce(8, func(i int) bool {
		ok, err := st.CreateRunNamed(ctx, &Run{ID: fmt.Sprintf("run-%d", i), Name: "demo", Command: []string{"true"}, Status: StatusRunning, StartedAt: time.Now()})
		if err != nil {
			t.Error(err)
		}
		return ok
	})
	if won != 1 {
		t.Errorf("%d runs got the name, want 1", won)
	}
	runs, _ := st.Runs(ctx, 100)
	if len(runs) != 1 {
		t.Errorf("%d runs recorded, want 1 (the others were refused, not recorded)", len(runs))
	}
}

// TestCanWrite: a database another connection holds the write lock on
// answers at once (within the wait given) that it is locked, and can be
// written again once the lock is gone.
func TestCanWrite(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openStore(t, dir)
	if err := s.CanWrite(ctx, 100*time.Millisecond); err != nil {
		t.Fatalf("a fresh database: %v", err)
	}
	other, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	tx, err := other.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`UPDATE runs SET name=name`); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = s.CanWrite(ctx, 100*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "locked by another process") {
		t.Errorf("locked: %v, want that it is locked", err)
	}
	// a CanWrite that did not set its own wait would wait the database's
	// busy timeout, 10 s
	if d := time.Since(start); d >= 10*time.Second {
		t.Errorf("CanWrite waited %s for a 100ms wait: the busy timeout's 10 s", d)
	}
	tx.Rollback()
	if err := s.CanWrite(ctx, 100*time.Millisecond); err != nil {
		t.Errorf("after the lock is gone: %v", err)
	}
}

// TestGroupSharesName: the runs of one group (a job's tasks, started at
// once) all take the job's name; a run of another group, or of none, does
// not, and FreeName and NameOwner look past the group's own runs.
func TestGroupSharesName(t *testing.T) {
	st := openStore(t, t.TempDir())
	ctx := context.Background()
	create := func(id, name, group string) bool {
		ok, err := st.CreateRunNamed(ctx, &Run{ID: id, Name: name, Group: group, Command: []string{"true"}, Status: StatusRunning, StartedAt: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	won := atOnce(4, func(i int) bool { return create(fmt.Sprintf("task-%d", i), "ranks", "4242") })
	if won != 4 {
		t.Errorf("%d of the job's 4 tasks got its name", won)
	}
	if create("other", "ranks", "4243") || create("plain", "ranks", "") {
		t.Error("a run of another group, or of none, took the group's name")
	}
	if n, _ := st.FreeName(ctx, "ranks", "4242"); n != "ranks" {
		t.Errorf("FreeName for the group's own name: %s", n)
	}
	if n, _ := st.FreeName(ctx, "ranks", "4243"); n != "ranks-2" {
		t.Errorf("FreeName for another group: %s, want ranks-2", n)
	}
	if n, _ := st.FreeName(ctx, "ranks", ""); n != "ranks-2" {
		t.Errorf("FreeName for no group: %s, want ranks-2", n)
	}
	if _, err := st.NameOwner(ctx, "ranks", "4242"); !errors.Is(err, ErrNotFound) {
		t.Errorf("NameOwner past the group's own runs: %v", err)
	}
	if r, err := st.NameOwner(ctx, "ranks", ""); err != nil || r.Group != "4242" {
		t.Errorf("NameOwner: %v %v", r, err)
	}
}
