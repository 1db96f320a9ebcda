package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/vramguard/vramguard/internal/procfs"
	"github.com/vramguard/vramguard/internal/runctl"
	"github.com/vramguard/vramguard/internal/store"
)

// openStore opens the state database and marks runs whose supervisor
// vanished as lost, so every command sees an honest status.
func (f *Factory) openStore(ctx context.Context) (*store.Store, error) {
	s, err := store.Open(f.Home())
	if err != nil {
		return nil, storeErr(err)
	}
	return f.markLost(ctx, s), nil
}

// openStoreRead is openStore for commands that only read (runs, logs,
// explain): they create nothing, and a state directory without a database
// answers an error that wraps store.ErrNoStore.
func (f *Factory) openStoreRead(ctx context.Context) (*store.Store, error) {
	s, err := store.OpenExisting(f.Home())
	if errors.Is(err, store.ErrNoStore) {
		return nil, err
	}
	if err != nil {
		return nil, storeErr(err)
	}
	return f.markLost(ctx, s), nil
}

// storeErr maps a failure to open the database to an exit: a damaged file
// is bad input (exit 2) with how to set it aside; anything else is the
// environment (exit 3).
func storeErr(err error) error {
	var ce *store.CorruptError
	if errors.As(err, &ce) {
		return Usagef("%v; move it aside to start a fresh one (its runs are then no longer listed): mv %s %s.corrupt",
			err, ce.Path, ce.Path)
	}
	return Envf("%v", err)
}

func (f *Factory) markLost(ctx context.Context, s *store.Store) *store.Store {
	fs := procfs.FS{}
	if _, err := s.MarkLost(ctx, func(pid int, start uint64) bool { return runctl.Alive(fs, pid, start) }, f.Now()); err != nil {
		f.Logger().Warn("mark lost runs", "err", err)
	}
	return s
}

// runArg is the run a command's optional RUN argument names: it, or the
// last run.
func runArg(args []string) string {
	if len(args) == 1 {
		return args[0]
	}
	return "last"
}

// openRun opens the store and finds RUN in it; the caller closes the store.
func (f *Factory) openRun(ctx context.Context, ref string) (*store.Store, *store.Run, error) {
	st, err := f.openStoreRead(ctx)
	if errors.Is(err, store.ErrNoStore) {
		return nil, nil, Usagef("unknown run %q: no runs yet in %s", ref, f.Home())
	}
	if err != nil {
		return nil, nil, err
	}
	r, err := resolveRun(ctx, st, ref)
	if err != nil {
		st.Close()
		return nil, nil, err
	}
	return st, r, nil
}

// resolveRun finds RUN (id, id prefix, name or "last") or returns a usage error.
func resolveRun(ctx context.Context, s *store.Store, ref string) (*store.Run, error) {
	r, err := s.Resolve(ctx, ref)
	var amb *store.AmbiguousError
	if errors.Is(err, store.ErrNotFound) || errors.As(err, &amb) {
		return nil, Usagef("%v", err)
	}
	if err != nil {
		return nil, fmt.Errorf("find run %q: %w", ref, err)
	}
	return r, nil
}
