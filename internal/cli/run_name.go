package cli

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/vramguard/vramguard/internal/store"
)

// nameRun settles the name a new run is recorded under. A name answers for
// one run, or for the runs of one group (the tasks of one Slurm job, each
// supervised on its node, share the job's --name): when an earlier run still has the --name asked for (every
// recorded run can be found by its name), the new run is recorded as the
// first free of NAME-2, NAME-3, ... and vramguard says so, so that neither
// run is lost behind the other. --name itself keeps what was asked: what
// --adapt-remember remembers is per asked name. "last" names no run (it
// means the newest one). A kernel's run is named after its notebook instead
// (run_kernel.go). With --detach the background supervisor settles the
// name again when it records the run, and the parent's prediction is only
// what it says.
func nameRun(ctx context.Context, f *Factory, o *RunOptions) error {
	if o.Name == "" || o.Kernel {
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
		// the name is checked where the run is recorded: a state database
		// that cannot be read now does not keep the job from running
		// (openRunStore says why)
		return nil
	}
	defer st.Close()
	owner, err := st.NameOwner(ctx, o.Name, o.groupFl.group(os.Getenv))
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return Envf("%v", err)
	}
	name, err := st.FreeName(ctx, o.Name, o.groupFl.group(os.Getenv))
	if err != nil {
		return Envf("%v", err)
	}
	o.runName = name
	if o.detachedID != "" {
		return nil // the parent said so on its terminal
	}
	what := owner.Status
	if owner.Status == store.StatusFinished {
		what = "ended: " + dash(owner.Reason)
	}
	fmt.Fprintf(f.IO.ErrOut, "vramguard: run %s (%s) is already named %s; this run is %s\n", owner.ID, what, o.Name, name)
	return nil
}

// recordName is the name the run is recorded under (see nameRun).
func (o *RunOptions) recordName() string {
	if o.runName != "" {
		return o.runName
	}
	return o.Name
}

// createRun records run; a named run whose name another run took since
// nameRun looked (two started at once) takes the next free one, and says so.
func createRun(ctx context.Context, f *Factory, o *RunOptions, st *store.Store, run *store.Run) error {
	if run.Name == "" {
		return st.CreateRun(ctx, run)
	}
	for try := 0; ; try++ {
		ok, err := st.CreateRunNamed(ctx, run)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if try == 20 {
			return Envf("could not find a free name for the run after %s: %s is taken", o.Name, run.Name)
		}
		name, err := st.FreeName(ctx, o.Name, run.Group)
		if err != nil {
			return Envf("%v", err)
		}
		fmt.Fprintf(f.IO.ErrOut, "vramguard: another run took the name %s as this one started; this run is %s\n", run.Name, name)
		run.Name, o.runName = name, name
	}
}
