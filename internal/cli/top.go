package cli

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/muesli/termenv"
	"github.com/spf13/cobra"

	"github.com/vramguard/vramguard/internal/attrib"
	"github.com/vramguard/vramguard/internal/gpu"
	"github.com/vramguard/vramguard/internal/gpu/sim"
	"github.com/vramguard/vramguard/internal/probe"
	"github.com/vramguard/vramguard/internal/runctl"
	"github.com/vramguard/vramguard/internal/sampler"
	"github.com/vramguard/vramguard/internal/users"
)

// topOptions is what `vramguard top` was asked to do.
type topOptions struct {
	GPU            gpuOptions
	Once           bool
	JSON           bool
	Interval       time.Duration
	DeviceInterval time.Duration
	Sort           string
	Group          bool
	Filter         string
	KillGrace      time.Duration
	// User and Mine keep the jobs of one owner (a name or UID; Mine: the
	// caller's).
	User string
	Mine bool
	// Agent is auto, none or the API socket of a machine-wide agent to
	// ask instead of sampling (--agent).
	Agent string
	// owner is the UID User or Mine resolved to (nil: every owner).
	owner *int
}

// resolveOwner turns --user / --mine into the UID whose jobs top keeps: a
// name from the passwd database, or one a simulated scenario gives.
func (o *topOptions) resolveOwner(db *users.DB, b gpu.Backend) error {
	switch {
	case o.User != "" && o.Mine:
		return Usagef("--user and --mine cannot be used together")
	case o.Mine:
		uid := os.Getuid()
		o.owner = &uid
	case o.User != "":
		uid, ok := db.Lookup(o.User)
		if s, isSim := b.(*sim.Backend); !ok && isSim {
			uid, ok = s.Scenario().LookupUser(o.User)
		}
		if !ok {
			return Usagef("--user %q: no such user in the passwd database (give a name or a UID)", o.User)
		}
		o.owner = &uid
	}
	return nil
}

// ownedBy keeps the jobs whose owner is uid (all of them for nil). It
// returns a new slice.
func ownedBy(jobs []attrib.Job, uid *int) []attrib.Job {
	out := make([]attrib.Job, 0, len(jobs))
	for _, j := range jobs {
		if uid == nil || j.UID == *uid {
			out = append(out, j)
		}
	}
	return out
}

// NewCmdTop builds `vramguard top`.
func NewCmdTop(f *Factory) *cobra.Command {
	o := &topOptions{}
	cmd := &cobra.Command{
		Use:   "top",
		Short: "Every GPU process on the machine, grouped into jobs by owner",
		Long: `top shows every GPU and who holds its memory: supervised runs, notebook
kernels, Kubernetes pods, containers, SLURM jobs, services and plain
processes. DataLoader workers and other children count toward the job that
spawned them and are listed under it.

Each GPU gets a memory bar with used / total, the share used and its
utilisation. Each job gets a row: GPU (indexes; a MIG instance as
GPU:INSTANCE, e.g. 7:1), PID (of the job's root), USER (the root
process's owner: its login name, or its UID where /etc/passwd has none;
names past 12 characters end in …), JOB (a pod as
namespace/name where the kubelet's pod log directory names it), OWNER,
GPU MEM, SM (utilisation of its GPUs), ALLOC / RESERVED (PyTorch's own
figures, from the probe), RSS, HISTORY (GPU memory over the last minutes)
and FLAGS. An orphan's whole command line is shown under its row.

--user NAME (or UID) shows only that user's jobs, --mine only yours. GPU
memory held by PIDs /proc does not show (exited, hidden by hidepid, another
PID namespace) is never dropped: the footer counts it, owner unknown.

FLAGS is the leak detector's verdict: "judging…" until it has about five
minutes of samples (every job under --once), then stable, leak, host leak
or cache growth; a supervised run shows its own monitor's findings ("no
leak" once it has run that long without one). oom-risk follows while an
OOM forecast points ahead, orphan when the job's parent is gone.

Colours show load: green under 10% of a device's memory (or utilisation),
red from 80% (75% utilisation), yellow between, in shades for light and
for dark terminals. NO_COLOR (or CLICOLOR=0) turns colours off; bold and
reverse stay.

The table fits the terminal: columns are as wide as their values, so no
figure is cut; JOB and OWNER shrink (a cut name ends in …) and the memory
bars get shorter; when that is not enough, columns leave in this order:
  ` + topDropNames + `
JOB, GPU MEM and FLAGS always stay; a list taller than the terminal
scrolls. --once fits the terminal it prints to ($COLUMNS when it is not
one; every column when neither says).

Jobs are sorted by --sort across the whole table. --group (g on the
screen) lists them under their owner kind instead (SUPERVISED RUNS,
NOTEBOOKS, PODS, CONTAINERS, SLURM JOBS, SERVICES, PROCESSES), the groups
ordered by the same key (their total GPU memory or RSS, lowest PID, or
title) and the jobs sorted within them; an expanded job's processes are
sorted too.

Keys: up/down move, enter expands a job to its processes, s cycles the sort
(gpu, rss, pid, name), g groups by owner kind or not, / filters (enter
keeps, esc clears), x kills the selected job or process after you confirm
with y (SIGTERM, then SIGKILL after --kill-grace), q quits.

Without a GPU driver top says so and shows no GPUs; --simulate plays a
scenario file instead, so you can try it anywhere.`,
		Example: `  vramguard top
  vramguard top --simulate examples/scenarios/workstation.json
  vramguard top --once --json | jq '.jobs[] | {name, gpu_bytes}'
  vramguard top --once --sort rss --filter python
  vramguard top --once --group
  vramguard top --mine
  vramguard top --once --user alice`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runTop(cmd.Context(), f, o)
		},
	}
	o.GPU.addFlags(cmd)
	fl := cmd.Flags()
	fl.BoolVar(&o.Once, "once", false, "print one snapshot and exit")
	fl.BoolVar(&o.JSON, "json", false, "with --once: print the snapshot as JSON")
	fl.DurationVar(&o.Interval, "interval", time.Second, "how often to read process lists (at least 1s)")
	fl.DurationVar(&o.DeviceInterval, "device-interval", 0, "how often to read device memory (default: --interval)")
	fl.StringVar(&o.Sort, "sort", "gpu", "sort jobs (and an expanded job's processes) by gpu, rss, pid or name")
	fl.BoolVar(&o.Group, "group", false, "list jobs under their owner kind (runs, notebooks, pods, ...); g toggles it on the screen")
	fl.StringVar(&o.Filter, "filter", "", "show only jobs whose name, owner or command contains this text")
	fl.StringVar(&o.User, "user", "", "show only the jobs of this user (a login name or UID)")
	fl.BoolVar(&o.Mine, "mine", false, "show only your own jobs")
	fl.StringVar(&o.Agent, "agent", "auto", "ask a machine-wide agent (serve --shared) instead of sampling: auto (its socket under "+probe.SharedDirDefault+" when one runs), none, or its API socket")
	fl.DurationVar(&o.KillGrace, "kill-grace", 5*time.Second, "time between SIGTERM and SIGKILL when killing from top")
	return cmd
}

func runTop(ctx context.Context, f *Factory, o *topOptions) error {
	if !validSort(o.Sort) {
		return Usagef("--sort %q: want gpu, rss, pid or name", o.Sort)
	}
	if o.JSON && !o.Once {
		return Usagef("--json needs --once (top's screen is interactive)")
	}
	if o.Interval < sampler.MinProcessInterval {
		return Usagef("--interval %v: process lists are read at most once a second (the driver query takes a lock)", o.Interval)
	}
	if o.KillGrace < 0 {
		return Usagef("--kill-grace must not be negative")
	}
	if !o.Once && !f.IO.IsTTY {
		return Usagef("top needs a terminal; use --once (and --json) for scripts")
	}
	if ctx == nil {
		ctx = context.Background()
	}
	if done, err := topFromAgent(ctx, f, o); done || err != nil {
		return err
	}
	b, note, err := openGPU(ctx, o.GPU.Simulate, o.GPU.Backend)
	if err != nil {
		return err
	}
	defer b.Close()
	if err := o.resolveOwner(users.System(), b); err != nil {
		return err
	}
	hints := runctl.NewHints(f.Home(), f.Getenv)
	cfg := machineSampler(b, procSource(b, o.GPU.ProcRoot), o.GPU.ProcRoot, hints, f.Now)
	cfg.ProcessInterval, cfg.DeviceInterval = o.Interval, o.DeviceInterval
	s, err := sampler.New(cfg)
	if err != nil {
		return err
	}
	if o.Once {
		smp, err := s.Refresh(ctx)
		if err != nil {
			return Failf("%v", err)
		}
		return topOnce(f, o, smp, note)
	}
	return runTopTUI(ctx, f, o, s, note)
}

// topOnce prints one reading (--once).
func topOnce(f *Factory, o *topOptions, smp sampler.Reading, note string) error {
	smp.Attrib.Jobs = ownedBy(smp.Attrib.Jobs, o.owner)
	snap := newSnapshot(smp, note, o.Sort, o.Filter, o.Group)
	if o.JSON {
		return f.WriteJSON(snap)
	}
	if note != "" {
		fmt.Fprintln(f.IO.ErrOut, "vramguard:", note)
	}
	r, color := topRenderer(f.IO.Out, f.Getenv, termenv.WithTTY(f.IO.IsTTY))
	sc := &topScreen{st: newTopStyles(r, color), width: topTerminalWidth(f.IO.Out, f.Getenv), smp: &smp,
		group: o.Group, filter: o.Filter, cursor: -1}
	for i := range snap.Jobs {
		sc.rows = append(sc.rows, topRow{job: &snap.Jobs[i]})
	}
	return writeTopOnce(f.IO.Out, sc)
}

// topFromAgent runs top on a machine-wide agent's readings when one runs
// (--agent), so a user sees every job on the machine (other users' as
// owner and memory only); done is false when top should sample itself.
func topFromAgent(ctx context.Context, f *Factory, o *topOptions) (done bool, err error) {
	local := o.GPU.Simulate != "" || o.GPU.ProcRoot != "" || (o.GPU.Backend != "" && o.GPU.Backend != "auto")
	if local && o.Agent != "auto" && o.Agent != "none" {
		return false, Usagef("--agent %s cannot be used with --simulate, --gpu-backend or --proc-root (they sample here)", o.Agent)
	}
	if local {
		return false, nil
	}
	sock, err := agentSocket(o.Agent, f.Getenv)
	if err != nil || sock == "" {
		return false, err
	}
	src := newAgentSource(sock, o.Interval)
	smp, err := src.Refresh(ctx)
	if err != nil {
		if o.Agent != "auto" {
			return false, Envf("the agent at %s did not answer: %v", sock, err)
		}
		fmt.Fprintf(f.IO.ErrOut, "vramguard: the agent at %s did not answer (%v); sampling this machine directly\n", sock, err)
		return false, nil
	}
	if err := o.resolveOwner(users.System(), nil); err != nil {
		return true, err
	}
	note := "from the agent at " + sock
	if o.Once {
		if o.JSON {
			note = ""
		}
		return true, topOnce(f, o, smp, note)
	}
	return true, runTopTUI(ctx, f, o, src, "")
}
