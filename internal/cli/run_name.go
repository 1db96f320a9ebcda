package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/vramguard/vramguard/internal/store"
)

// nameRun settles the --name of a new run. A name answers for one run: when
// an earlier run still has it (every recorded run can be found by its
// name), the new run gets the first free of NAME-2, NAME-3, ... and
// vramguard says so, so that neither run is lost behind the other. "last"
// names no run (it means the newest one). A kernel's run is named after its
// notebook instead (run_kernel.go), and the background supervisor of
// --detach takes the name its parent settled.
func nameRun(ctx context.Context, f *Factory, o *RunOptions) error {
	if o.Name == "" || o.Kernel || o.detachedID != "" {
		return nil
	}
	if o.Name == "last" {
		return Usagef(`--name last: "last" always means the newest run; choose another name`)
	}
	st, err := f.openStoreRead(ctx)
	if errors.Is(err, store.ErrNoStore) {
		return nil // no run yet, so no name is taken
	}
	if err != nil {
		return err
	}
	defer st.Close()
	owner, err := st.NameOwner(ctx, o.Name)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return Envf("%v", err)
	}
	name, err := st.FreeName(ctx, o.Name)
	if err != nil {
		return Envf("%v", err)
	}
	what := owner.Status
	if owner.Status == store.StatusFinished {
		what = "ended: " + dash(owner.Reason)
	}
	fmt.Fprintf(f.IO.ErrOut, "vramguard: run %s (%s) is already named %s; this run is %s\n", owner.ID, what, o.Name, name)
	o.Name = name
	return nil
}
