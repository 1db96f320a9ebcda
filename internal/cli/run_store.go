package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vramguard/vramguard/internal/store"
)

// runStore is where `run` records its run: the state directory's database,
// or, when that cannot be written now (a read-only $VRAMGUARD_HOME, another
// process holding a write transaction), a private database in a temporary
// directory. The job never waits on the state database: vramguard says once
// what it could not record, records the run in the temporary directory, and
// copies it into the state directory when the run ends if it can be written
// by then.
type runStore struct {
	*store.Store
	home     string // the directory the run's database and files are in
	fallback bool   // home is the temporary directory, not f.Home()
}

// storeWait is how long run waits for another process's write lock on the
// state database before it records the run elsewhere and starts the job.
const storeWait = 200 * time.Millisecond

func openRunStore(ctx context.Context, f *Factory) (*runStore, error) {
	st, err := store.Open(f.Home())
	if err == nil {
		if err = st.CanWrite(ctx, storeWait); err == nil {
			return &runStore{Store: f.markLost(ctx, st), home: f.Home()}, nil
		}
		st.Close()
	}
	dir, err := fallbackHome(f, err)
	if err != nil {
		return nil, err
	}
	fst, ferr := store.Open(dir)
	if ferr != nil {
		os.RemoveAll(dir)
		return nil, Envf("no database could be made in %s: %v", dir, ferr)
	}
	fmt.Fprintf(f.IO.ErrOut, "  and copied to %s when the run ends if it can be written then\n", f.Home())
	return &runStore{Store: fst, home: dir, fallback: true}, nil
}

// homeWritable reports why the state directory's database cannot be
// written now (nil when it can), waiting at most storeWait for a lock.
func homeWritable(ctx context.Context, home string) error {
	st, err := store.Open(home)
	if err != nil {
		return err
	}
	defer st.Close()
	return st.CanWrite(ctx, storeWait)
}

// fallbackHome makes the temporary directory a run is recorded in when the
// state directory cannot be written (why), and says so once. A damaged
// database is no such case: it has a fix to make first (exit 2).
func fallbackHome(f *Factory, why error) (string, error) {
	var ce *store.CorruptError
	if errors.As(why, &ce) {
		return "", storeErr(why)
	}
	if aerr := unix.Access(f.Home(), unix.W_OK); aerr != nil && !errors.Is(aerr, unix.ENOENT) {
		why = fmt.Errorf("%s is not writable (%v)", f.Home(), aerr)
	}
	dir, err := os.MkdirTemp("", "vramguard-unrecorded-")
	if err != nil {
		return "", Envf("cannot record the run in %s: %v; and no temporary directory to record it in: %v", f.Home(), why, err)
	}
	fmt.Fprintf(f.IO.ErrOut, "vramguard: cannot record this run in %s: %v\n"+
		"  the job runs; its log and records are kept in %s (VRAMGUARD_HOME=%s vramguard explain last)\n", f.Home(), why, dir, dir)
	return dir, nil
}

// finish copies a run recorded in the temporary directory into the state
// directory's database, when that can be written now, and says which.
func (rs *runStore) finish(ctx context.Context, f *Factory, id string) {
	if !rs.fallback {
		return
	}
	ctx = context.WithoutCancel(ctx)
	if err := copyRun(ctx, rs.Store, f.Home(), id); err != nil {
		f.Logger().Debug("copy the run to the state directory", "err", err)
		fmt.Fprintf(f.IO.ErrOut, "vramguard: the run is recorded only in %s (VRAMGUARD_HOME=%s vramguard explain %s)\n", rs.home, rs.home, id)
		return
	}
	fmt.Fprintf(f.IO.ErrOut, "vramguard: recorded the run in %s after all; its log stays in %s\n", f.Home(), rs.home)
}

// copyRun records run id of from in the database of home: the run, its
// attempts, events and samples.
func copyRun(ctx context.Context, from *store.Store, home, id string) error {
	to, err := store.Open(home)
	if err != nil {
		return err
	}
	defer to.Close()
	if err := to.CanWrite(ctx, time.Second); err != nil {
		return err
	}
	r, err := from.Resolve(ctx, id)
	if err != nil {
		return err
	}
	atts, err := from.Attempts(ctx, id)
	if err != nil {
		return err
	}
	evs, err := from.Events(ctx, id)
	if err != nil {
		return err
	}
	samples, err := from.Samples(ctx, id)
	if err != nil {
		return err
	}
	if err := to.CreateRun(ctx, r); err != nil {
		return err
	}
	for _, a := range atts {
		if err := to.StartAttempt(ctx, a); err != nil {
			return err
		}
		if a.EndedAt != nil && a.ExitCode != nil {
			if err := to.FinishAttempt(ctx, id, a.N, *a.EndedAt, *a.ExitCode, a.Reason, a.Verdict); err != nil {
				return err
			}
		}
	}
	for _, e := range evs {
		if err := to.AddEvent(ctx, e); err != nil {
			return err
		}
	}
	for _, s := range samples {
		if err := to.AddSample(ctx, id, s); err != nil {
			return err
		}
	}
	if r.EndedAt != nil && r.ExitCode != nil {
		if err := to.FinishRun(ctx, id, r.Status, r.Reason, *r.ExitCode, *r.EndedAt, r.Postmortem); err != nil {
			return err
		}
	}
	if err := to.UpdatePeaks(ctx, id, r.PeakRSS, r.PeakGPU); err != nil {
		return err
	}
	return nil
}
