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
		return nil, Envf("%v", err)
	}
	fs := procfs.FS{}
	if _, err := s.MarkLost(ctx, func(pid int, start uint64) bool { return runctl.Alive(fs, pid, start) }, f.Now()); err != nil {
		f.Logger().Warn("mark lost runs", "err", err)
	}
	return s, nil
}

// openRun opens the store and finds RUN in it; the caller closes the store.
func (f *Factory) openRun(ctx context.Context, ref string) (*store.Store, *store.Run, error) {
	st, err := f.openStore(ctx)
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
	if errors.Is(err, store.ErrNotFound) {
		return nil, Usagef("%v", err)
	}
	if err != nil {
		return nil, fmt.Errorf("find run %q: %w", ref, err)
	}
	return r, nil
}
