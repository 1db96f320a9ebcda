package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/vramguard/vramguard/internal/adapt"
	"github.com/vramguard/vramguard/internal/lazyre"
	"github.com/vramguard/vramguard/internal/supervise"
)

// adaptFlags are run's --adapt flags.
type adaptFlags struct {
	on       bool
	batch    int
	accum    int
	workers  int
	minBatch int
	remember bool
}

func addAdaptFlags(fl *pflag.FlagSet, a *adaptFlags) {
	fl.BoolVar(&a.on, "adapt", false, "after a death of memory (CUDA OOM, full /dev/shm, host OOM kill), restart with settings that fit: a smaller --batch with more --accum, the allocator setting against fragmentation, fewer --workers (needs --restart; docs/ADAPT.md)")
	fl.IntVar(&a.batch, "batch", 0, "with --adapt: the batch size to start from, substituted for {batch} and exported as VRAMGUARD_BATCH")
	fl.IntVar(&a.accum, "accum", 1, "with --adapt: gradient accumulation steps to start from ({accum}, VRAMGUARD_ACCUM); multiplied as the batch shrinks so batch×accum stays the same")
	fl.IntVar(&a.workers, "workers", 0, "with --adapt: DataLoader workers to start from ({workers}, VRAMGUARD_WORKERS); halved down to 0")
	fl.IntVar(&a.minBatch, "min-batch", 1, "with --adapt: never go below this batch size")
	fl.BoolVar(&a.remember, "adapt-remember", true, "with --adapt and --name: start from the settings that fit the last run of that name, and remember them when this one succeeds")
}

var placeholderRe = lazyre.New(`\{(batch|accum|workers)\}`)

// check validates the --adapt flags against the command; changed reports
// whether a flag was given on the command line.
func (a *adaptFlags) check(o *RunOptions, changed func(string) bool, warn io.Writer) error {
	used := map[string]bool{}
	for _, arg := range o.Command {
		for _, m := range placeholderRe.FindAllStringSubmatch(arg, -1) {
			used[m[1]] = true
		}
	}
	if !a.on {
		for _, name := range []string{"batch", "accum", "workers", "min-batch", "adapt-remember"} {
			if changed(name) {
				return Usagef("--%s works with --adapt only", name)
			}
		}
		if len(used) > 0 {
			return Usagef("the command has placeholders (%s) that only --adapt fills: add --adapt and their flags, e.g. --adapt --restart on-failure --batch 64", placeholderList(used))
		}
		return nil
	}
	switch {
	case o.Restart == supervise.RestartNever:
		return Usagef("--adapt changes the settings of the next attempt, so it needs restarts: add --restart on-failure (or always)")
	case o.Kernel:
		return Usagef("--adapt is for scripts: a Jupyter kernel's restarts are Jupyter's")
	case changed("batch") && a.batch < 1:
		return Usagef("--batch must be at least 1")
	case a.accum < 1:
		return Usagef("--accum must be at least 1")
	case a.workers < 0:
		return Usagef("--workers must be 0 or more")
	case a.minBatch < 1:
		return Usagef("--min-batch must be at least 1")
	case changed("batch") && a.minBatch > a.batch:
		return Usagef("--min-batch %d is above --batch %d", a.minBatch, a.batch)
	case changed("adapt-remember") && a.remember && o.Name == "":
		return Usagef("--adapt-remember remembers settings per --name: give the run a --name")
	}
	for name, flag := range map[string]string{"batch": "batch", "accum": "batch", "workers": "workers"} {
		if used[name] && !changed(flag) {
			return Usagef("the command uses {%s} but --%s is not given", name, flag)
		}
	}
	if !changed("batch") && !changed("workers") {
		fmt.Fprintln(warn, "vramguard: --adapt without --batch or --workers can only set the allocator against fragmentation")
	}
	return nil
}

func placeholderList(used map[string]bool) string {
	var l []string
	for _, n := range []string{"batch", "accum", "workers"} {
		if used[n] {
			l = append(l, "{"+n+"}")
		}
	}
	return strings.Join(l, ", ")
}

// initial is the settings the flags ask for.
func (a *adaptFlags) initial(changed func(string) bool) adapt.Settings {
	s := adapt.Settings{Batch: adapt.Unset, Accum: adapt.Unset, Workers: adapt.Unset}
	if changed("batch") {
		s.Batch, s.Accum = a.batch, a.accum
	}
	if changed("workers") {
		s.Workers = a.workers
	}
	return s
}

// remembered is what --adapt-remember keeps per run name.
type remembered struct {
	// Initial are the settings the flags asked for; Fitted those that
	// fit. A later run starts from Fitted only when its flags ask for
	// Initial again.
	Initial adapt.Settings `json:"initial"`
	Fitted  adapt.Settings `json:"fitted"`
	RunID   string         `json:"run_id"`
	SavedAt time.Time      `json:"saved_at"`
}

var unsafeName = lazyre.New(`[^A-Za-z0-9._-]`)

func rememberPath(home, name string) string {
	return filepath.Join(home, "adapt", unsafeName.ReplaceAllString(name, "_")+".json")
}

// adaptOptions builds the supervisor's --adapt configuration, starting from
// remembered settings where they apply (and saying so).
func adaptOptions(f *Factory, o *RunOptions) *supervise.Adapt {
	a := &o.adapt
	if !a.on {
		return nil
	}
	init := a.initial(o.changed)
	cfg := &supervise.Adapt{Initial: init, Policy: adapt.Policy{MinBatch: a.minBatch}}
	if !a.remember || o.Name == "" {
		return cfg
	}
	b, err := os.ReadFile(rememberPath(f.Home(), o.Name))
	if err != nil {
		return cfg
	}
	var r remembered
	if err := json.Unmarshal(b, &r); err != nil || r.Initial != init || r.Fitted == init {
		return cfg
	}
	cfg.Initial = r.Fitted
	fmt.Fprintf(f.IO.ErrOut, "vramguard: starting from the settings that fit run %s of %q: %s (--adapt-remember=false starts from the flags)\n", r.RunID, o.Name, r.Fitted)
	return cfg
}

// rememberFit keeps the settings a successful adapted run ended with.
func rememberFit(f *Factory, o *RunOptions, res *supervise.Result) error {
	a := &o.adapt
	pm := res.Postmortem
	if !a.on || !a.remember || o.Name == "" || pm == nil || pm.Reason != "success" || pm.Settings == nil || len(pm.Adaptations) == 0 {
		return nil
	}
	r := remembered{Initial: a.initial(o.changed), Fitted: *pm.Settings, RunID: pm.RunID, SavedAt: f.Now().UTC()}
	b, _ := json.MarshalIndent(r, "", "  ")
	path := rememberPath(f.Home(), o.Name)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	fmt.Fprintf(f.IO.ErrOut, "vramguard: the next run named %q starts from these settings: %s\n", o.Name, r.Fitted)
	return nil
}
