package cli

import (
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/vramguard/vramguard/internal/groups"
	"github.com/vramguard/vramguard/internal/ranks"
	"github.com/vramguard/vramguard/internal/store"
)

// groupFlags are run's flags for a distributed job with one `vramguard
// run` per node (`srun vramguard run -- python train.py`): the job's one
// identity across nodes, and the node name this run's ranks report.
type groupFlags struct {
	Group string
	Node  string
}

func (g *groupFlags) add(fl *pflag.FlagSet) {
	fl.StringVar(&g.Group, "group", "", "name of the distributed job this run is one node's part of, recorded with the run and exported to the job as VRAMGUARD_GROUP, so every node's serve labels its ranks alike (default: $SLURM_JOB_ID, else $TORCHELASTIC_RUN_ID)")
	fl.StringVar(&g.Node, "node", "", "node name of this run's ranks on serve's rank series, exported to the job as VRAMGUARD_NODE (default: the job's $SLURMD_NODENAME, else the agent's --node)")
}

// group is the run's group: --group, else Slurm's job id, else torchrun's
// run id (its default "none" names no job), else "".
func (g *groupFlags) group(getenv func(string) string) string {
	if s := strings.TrimSpace(g.Group); s != "" {
		return s
	}
	for _, k := range []string{"SLURM_JOB_ID", "TORCHELASTIC_RUN_ID"} {
		if v := strings.TrimSpace(getenv(k)); v != "" && v != "none" {
			return v
		}
	}
	return ""
}

// env is the job's environment with the group and node exported.
func (g *groupFlags) env(base []string, getenv func(string) string) []string {
	env := base
	if grp := g.group(getenv); grp != "" {
		env = append(env[:len(env):len(env)], "VRAMGUARD_GROUP="+grp)
	}
	if n := strings.TrimSpace(g.Node); n != "" {
		env = append(env[:len(env):len(env)], "VRAMGUARD_NODE="+n)
	}
	return env
}

// recorder is what shares run's ranks with the job's other nodes (nil for
// a run of no group); the rank the run's environment names (a Slurm
// task's) is recorded as running at once.
func (g *groupFlags) recorder(f *Factory, run *store.Run) *groups.Recorder {
	if run.Group == "" {
		return nil
	}
	host, _ := os.Hostname()
	rec := &groups.Recorder{Dir: groups.Dir(f.GroupDir()), Group: run.Group, RunID: run.ID, RunName: run.Name,
		StateDir: f.Home(), Host: host, Node: strings.TrimSpace(g.Node), Now: f.Now,
		Warn: func(err error) { f.Logger().Warn("group records", "err", err) }}
	p := ranks.PlaceFromEnv(os.Environ())
	if p.Node == "" {
		p.Node = ranks.NodeName(os.Environ(), host)
	}
	rec.Started(p)
	return rec
}
