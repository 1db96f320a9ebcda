package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/vramguard/vramguard/internal/attrib"
	"github.com/vramguard/vramguard/internal/diagnose"
	"github.com/vramguard/vramguard/internal/jupyter"
	"github.com/vramguard/vramguard/internal/postmortem"
	"github.com/vramguard/vramguard/internal/procfs"
	"github.com/vramguard/vramguard/internal/store"
	"github.com/vramguard/vramguard/internal/supervise"
	"github.com/vramguard/vramguard/internal/timeline"
)

// Variables between `run --kernel` and the kernel it starts.
const (
	// envPreviousDeath carries the one line the kernel shows in its notebook
	// (probe: vramguard/jupyter_notice.py).
	envPreviousDeath = "VRAMGUARD_PREVIOUS_DEATH"
	// envSessionName is the notebook path jupyter_server gives a kernel.
	envSessionName = "JPY_SESSION_NAME"
	// envLastAutosave is the newest autosave file an earlier kernel of the
	// notebook wrote (%vramguard restore loads it).
	envLastAutosave = "VRAMGUARD_LAST_AUTOSAVE"
	// noticeExtension loads the notebook side of the probe (the notice, the
	// per-cell messages, the %vramguard magics) into IPython's kernel.
	noticeExtension = "--IPKernelApp.extra_extensions=vramguard.jupyter_notice"
)

// runKernel supervises a Jupyter kernel (run --kernel). Jupyter starts a new
// process for every restart of a kernel, with the same connection file: the
// kernel's identity from that file (jupyter.KernelID: a server's kernel id,
// or for any other client's file its path and key) finds the run of the
// earlier processes, which is reopened so that restarts become attempts of
// one run. When the kernel's (or, for a
// new kernel, its notebook's) previous attempt died, the new kernel says so
// in the notebook through the probe.
func runKernel(ctx context.Context, f *Factory, o *RunOptions, st *store.Store, limit uint64, id string) error {
	file, ok := attrib.ConnectionFile(o.Command)
	if !ok {
		return Usagef("--kernel: the command names no connection file (-f FILE); install the kernelspec with `vramguard jupyter install`")
	}
	if abs, err := filepath.Abs(file); err == nil {
		file = abs
	}
	// The client wrote the file before starting the kernel; a kernel
	// started on a file that does not exist yet writes it itself, and is
	// then known by the path alone.
	var conn *jupyter.Connection
	if c, err := jupyter.ReadConnection(file); err == nil {
		conn = &c
	}
	kid := jupyter.KernelID(file, conn)
	_, fromServer := attrib.ServerKernelID(file)
	notebook := kernelNotebook(os.Getenv(envSessionName))
	me, _ := procfs.FS{}.Proc(os.Getpid())
	now := f.Now()

	var run *store.Run
	first := 1
	var prev *store.Kernel // whose death to announce
	if k, err := st.KernelByID(ctx, kid); err == nil {
		if r, err := st.Resolve(ctx, k.RunID); err == nil && r.ID == k.RunID {
			atts, err := st.Attempts(ctx, r.ID)
			if err != nil {
				return Failf("read attempts of %s: %v", r.ID, err)
			}
			if len(atts) > 0 {
				first = atts[len(atts)-1].N + 1
			}
			if err := st.ReopenRun(ctx, r.ID, os.Getpid(), me.StartTicks); err != nil {
				return Failf("%v", err)
			}
			run, prev = r, k
			if notebook == "" {
				notebook = k.Notebook
			}
			if name := kernelRunName(notebook, o.Name); name != r.Name && r.Name == o.Name {
				if err := st.SetRunName(ctx, r.ID, name); err == nil {
					r.Name = name
				}
			}
		}
	} else if !errors.Is(err, store.ErrNotFound) {
		return Failf("look up kernel %s: %v", kid, err)
	}
	if run == nil {
		cwd, _ := os.Getwd()
		run = &store.Run{ID: id, Name: kernelRunName(notebook, o.Name), Command: o.Command, Cwd: cwd, Status: store.StatusRunning,
			StartedAt: now, SupervisorPID: os.Getpid(), SupervisorStart: me.StartTicks, Dir: supervise.RunDir(f.Home(), id)}
		if err := st.CreateRun(ctx, run); err != nil {
			return Failf("%v", err)
		}
		if notebook != "" {
			if k, err := st.LatestKernelForNotebook(ctx, notebook, kid); err == nil {
				prev = k
			}
		}
	}
	if err := st.SetKernel(ctx, kid, run.ID, notebook, now); err != nil {
		return Failf("%v", err)
	}
	// The probe's environment is the probe hook's (run_probe.go), as for
	// any run: the kernel reports to this supervisor. Only what is a
	// kernel's own is added here: the notice and its extension.
	os.Unsetenv(envLastAutosave) // one the server inherited is no autosave of this notebook
	if prev != nil {
		if as := newestAutosave(ctx, st, prev.RunID); as != nil {
			o.priorAutosave = as
			if !o.NoProbe {
				os.Setenv(envLastAutosave, as.Path)
			}
		}
		if line, n := deathNotice(ctx, st, prev, f.HomeFlag, o.priorAutosave, now); line != "" {
			// The server's log gets the line in any case; the notebook
			// only through the extension, which ships with the probe.
			fmt.Fprintf(f.IO.ErrOut, "vramguard: kernel %s: %s\n", kid, line)
			if !o.NoProbe {
				os.Setenv(envPreviousDeath, line)
				st.SetKernelNoticed(ctx, prev.KernelID, n)
			}
		}
	}
	if !o.NoProbe {
		// Every probed IPython kernel loads the notebook side (the per-cell
		// messages, the magics and the notice), not only one with a death
		// to announce: the cells of this kernel are what its successor's
		// notice names.
		o.Command = withNotice(o.Command)
	}
	if notebook == "" && fromServer {
		// Only a server names its files kernel-ID.json, and only a
		// server has sessions to ask.
		go recordNotebook(ctx, f, kid, file, o.Name)
	}
	return superviseRun(ctx, f, o, st, run, limit, first)
}

// kernelRunName is the name of a kernel's run: its notebook's file name
// (analysis.ipynb), or until the notebook is known (a console has none)
// the name the kernelspec gave (its display name).
func kernelRunName(notebook, fallback string) string {
	if notebook != "" {
		return filepath.Base(notebook)
	}
	return fallback
}

// kernelNotebook makes the session path jupyter_server gives a kernel
// absolute: it is relative to the server's root, and the kernel starts in
// the notebook's directory.
func kernelNotebook(session string) string {
	if session == "" || filepath.IsAbs(session) {
		return session
	}
	cwd, err := os.Getwd()
	if err != nil {
		return ""
	}
	return filepath.Join(cwd, filepath.Base(session))
}

// deathNotice is the line a notebook's next kernel shows when the last
// attempt of k's run died and no kernel has said so yet, with that attempt:
// the reason, the cell that was running then and what it had added (from
// the attempt's post-mortem), and the newest autosave with its age now.
func deathNotice(ctx context.Context, st *store.Store, k *store.Kernel, home string, autosave *postmortem.Autosave, now time.Time) (string, int) {
	atts, err := st.Attempts(ctx, k.RunID)
	if err != nil || len(atts) == 0 {
		return "", 0
	}
	a := atts[len(atts)-1]
	if a.N <= k.Noticed || !isDeath(a.Reason) {
		return "", 0
	}
	var v postmortem.Postmortem
	json.Unmarshal(a.Verdict, &v)
	explain := "vramguard explain " + k.RunID
	if home != "" {
		explain = "vramguard --home " + shellQuote(home) + " explain " + k.RunID
	}
	what := a.Reason
	if s := strings.TrimSpace(v.Summary); s != "" {
		if len(s) > 160 {
			s = s[:157] + "..."
		}
		what += " (" + s + ")"
	}
	if l := v.Kernel.RunningLine(); l != "" {
		what += " while " + l
	}
	if autosave != nil {
		what += fmt.Sprintf(". Newest autosave: %s, %s old", autosave.Path, postmortem.FormatSeconds(max(now.Sub(autosave.T).Seconds(), 0)))
		if len(autosave.Objects) > 0 {
			what += " (" + strings.Join(autosave.Objects, ", ") + ")"
		}
	}
	return fmt.Sprintf("the previous kernel of this notebook died: %s. Details: %s", what, explain), a.N
}

// newestAutosave is the newest autosave of a run's kernels whose file is
// still there, from its checkpoint events (the probe's ckpt messages with
// autosave set); nil when there is none.
func newestAutosave(ctx context.Context, st *store.Store, runID string) *postmortem.Autosave {
	evs, err := st.Events(ctx, runID)
	if err != nil {
		return nil
	}
	var best *postmortem.Autosave
	for _, e := range evs {
		if e.Kind != timeline.KindCheckpoint {
			continue
		}
		var d timeline.CheckpointData
		if json.Unmarshal(e.Data, &d) != nil || !d.Autosave || d.Path == "" || !filepath.IsAbs(d.Path) {
			continue
		}
		if best != nil && e.T.Before(best.T) {
			continue
		}
		if fi, err := os.Stat(d.Path); err != nil || !fi.Mode().IsRegular() {
			continue
		}
		best = &postmortem.Autosave{Path: d.Path, T: e.T, Objects: d.Objects, Bytes: d.Bytes}
	}
	return best
}

// isDeath tells a kernel that died from one that was shut down or
// restarted on purpose.
func isDeath(reason string) bool {
	switch reason {
	case "", diagnose.Success, diagnose.Interrupted, diagnose.Restarted:
		return false
	}
	return true
}

// withNotice makes an IPython kernel load the probe's notebook extension;
// other kernels are left alone (they cannot load it).
func withNotice(argv []string) []string {
	ipy := false
	for _, a := range argv {
		if strings.Contains(a, "ipykernel") {
			ipy = true
		}
		if a == noticeExtension {
			return argv
		}
	}
	if !ipy {
		return argv
	}
	return append(append([]string(nil), argv...), noticeExtension)
}

// recordNotebook asks the running servers which notebook kernel kid serves,
// for a few seconds after start (the session is recorded once the kernel is
// up), and keeps the answer so the notebook's next kernel can find this one;
// a run that still has the kernelspec's name (unnamed) takes the
// notebook's.
func recordNotebook(ctx context.Context, f *Factory, kid, connFile string, unnamed string) {
	home, _ := os.UserHomeDir()
	// A server's connection files live in its runtime directory.
	dirs := append([]string{filepath.Dir(connFile)}, jupyter.RuntimeDirs(os.Getenv, home, false)...)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for range 30 {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		servers, _ := jupyter.Discover(dirs)
		for _, s := range servers {
			ss, err := jupyter.NewClient(s, 2*time.Second).Sessions(ctx)
			if err != nil {
				continue
			}
			for _, se := range ss {
				if se.Kernel.ID != kid || se.Path == "" {
					continue
				}
				nb := se.Path
				if s.RootDir != "" && !filepath.IsAbs(nb) {
					nb = filepath.Join(s.RootDir, nb)
				}
				st, err := store.Open(f.Home())
				if err != nil {
					return
				}
				defer st.Close()
				if k, err := st.KernelByID(ctx, kid); err == nil {
					st.SetKernel(ctx, kid, k.RunID, nb, k.Updated)
					if r, err := st.Resolve(ctx, k.RunID); err == nil && r.ID == k.RunID && r.Name == unnamed {
						st.SetRunName(ctx, r.ID, kernelRunName(nb, unnamed))
					}
				}
				return
			}
		}
	}
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r == '/' || r == '.' || r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
