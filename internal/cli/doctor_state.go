package cli

import (
	"fmt"

	"github.com/vramguard/vramguard/internal/doctor"
)

// stateDirCheck says where this node's runs are recorded when the state
// directory is on a network file system (a cluster's home over NFS):
// SQLite is unsafe there, so the database is the node's own (Home) and
// only the job groups' records are shared. ok is false when the state
// directory is local (nothing to say).
func stateDirCheck(f *Factory) (doctor.Result, bool) {
	home, netfs, why := f.homes()
	if netfs == "" {
		return doctor.Result{}, false
	}
	r := doctor.Result{ID: "storage.state", Group: "storage", Title: "State directory on a network file system",
		Facts: map[string]any{"state_dir": f.StateDir(), "filesystem": netfs, "database_dir": home, "group_dir": f.GroupDir()}}
	if why != "" {
		r.Status = doctor.Warn
		r.Evidence = fmt.Sprintf("the state directory %s is on %s, where SQLite's locks are unsafe, and this node has no directory of its own for its database: %s", f.StateDir(), netfs, why)
		r.Fix = "set VRAMGUARD_NODE_HOME to a directory on this node's own disk (each node keeps its runs there; the job groups' records stay shared in " + f.GroupDir() + ")"
		return r, true
	}
	r.Status = doctor.OK
	r.Evidence = fmt.Sprintf("the state directory %s is on %s: this node records its runs in its own database in %s; the records that tell a job's story across nodes (explain --group) are shared in %s", f.StateDir(), netfs, home, f.GroupDir())
	return r, true
}

// addCheck appends r to rep and counts it.
func addCheck(rep *doctor.Report, r doctor.Result) {
	rep.Checks = append(rep.Checks, r)
	switch r.Status {
	case doctor.OK:
		rep.Summary.OK++
	case doctor.Warn:
		rep.Summary.Warn++
	case doctor.Fail:
		rep.Summary.Fail++
	case doctor.NA:
		rep.Summary.NA++
	}
}
