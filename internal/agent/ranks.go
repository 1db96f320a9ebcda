package agent

import (
	"sort"
	"strconv"
	"strings"

	"github.com/vramguard/vramguard/internal/attrib"
	"github.com/vramguard/vramguard/internal/ranks"
)

// A distributed job's ranks, as this node's agent sees them. Each process of
// a job the agent watches is read once (by PID and start time) for its place
// in a distributed job: its rank from its environment (internal/ranks), the
// job it belongs to across nodes (its group) and the node its launcher says
// it runs on. The rank series (vramguard_rank_*) sum a rank's processes (the
// rank and the DataLoader workers that inherit its environment) on this
// node; Prometheus sums a job across nodes (deploy/prometheus/rules.yml).
//
// A process whose environment cannot be read (another user's, when the
// agent is not root) has no rank series: its job's vramguard_job_* series
// still count it.

// RankView is one rank of a distributed job on this node: the sum over the
// processes whose environment gives them that place (the rank's process and
// the workers it forked).
type RankView struct {
	// Group names the job across nodes (VRAMGUARD_GROUP, SLURM_JOB_ID,
	// TORCHELASTIC_RUN_ID); for a job without one, its key on this node
	// (as vramguard_job_info's key label).
	Group     string `json:"group"`
	Node      string `json:"node"`
	Rank      int    `json:"rank"`
	LocalRank *int   `json:"local_rank"`
	WorldSize *int   `json:"world_size"`
	// JobKey is the key of the agent's job the rank's processes are in.
	JobKey string `json:"job_key"`
	PIDs   []int  `json:"pids"`
	// RSSBytes is RSS (/proc/PID/stat) summed over the rank's processes.
	RSSBytes uint64   `json:"rss_bytes"`
	GPUs     []JobGPU `json:"gpus"`
	// Alloc and Reserved are PyTorch's figures from the probe, summed over
	// the rank's processes that report them (nil: none does).
	Alloc    *uint64 `json:"allocated_bytes,omitempty"`
	Reserved *uint64 `json:"reserved_bytes,omitempty"`
}

// rankLabel is an optional count as a label value ("" when unknown).
func rankLabel(n *int) string {
	if n == nil {
		return ""
	}
	return strconv.Itoa(*n)
}

// ranksOf gathers the ranks of jobs that run on this node, as the sampler
// read them from each process's environment (attrib.Process.Rank, once per
// process). A process whose environment names another node
// (VRAMGUARD_NODE, SLURMD_NODENAME) is that node's agent's to export; one
// that names no group is grouped by its job. Within a group, a process
// known only by Slurm's task id while others have a launcher's rank (RANK,
// MPI's) is the launcher of those (torchrun under srun), not a rank.
func (a *Agent) ranksOf(jobs []attrib.Job) []RankView {
	type member struct {
		job   *attrib.Job
		p     *attrib.Process
		group string
	}
	var ms []member
	launched := map[string]bool{} // groups with a rank from a launcher's variables
	for i := range jobs {
		j := &jobs[i]
		for k := range j.Processes {
			p := &j.Processes[k]
			if p.Rank == nil || !a.cfg.isThisNode(p.Node) {
				continue
			}
			group := p.Group
			if group == "" {
				group = j.Key
			}
			if p.RankFrom != ranks.SourceSlurm {
				launched[group] = true
			}
			ms = append(ms, member{j, p, group})
		}
	}
	at := map[string]int{}
	var out []RankView
	for _, m := range ms {
		p := m.p
		if p.RankFrom == ranks.SourceSlurm && launched[m.group] {
			continue
		}
		key := strings.Join([]string{m.group, strconv.Itoa(*p.Rank), rankLabel(p.LocalRank), rankLabel(p.WorldSize)}, "\x00")
		i, ok := at[key]
		if !ok {
			i = len(out)
			at[key] = i
			out = append(out, RankView{Group: m.group, Node: a.cfg.Node, Rank: *p.Rank, LocalRank: p.LocalRank, WorldSize: p.WorldSize,
				JobKey: m.job.Key, GPUs: []JobGPU{}})
		}
		v := &out[i]
		v.PIDs = append(v.PIDs, m.p.PID)
		v.RSSBytes += m.p.RSSBytes
		for _, r := range m.p.GPU {
			k := -1
			for x := range v.GPUs {
				if v.GPUs[x].UUID == r.DeviceUUID {
					k = x
				}
			}
			if k < 0 {
				k = len(v.GPUs)
				v.GPUs = append(v.GPUs, JobGPU{Index: r.DeviceIndex, UUID: r.DeviceUUID})
			}
			v.GPUs[k].Bytes += r.UsedBytes
		}
		if alloc, res, ok := a.cfg.Registry.ProbeMemory(m.p.PID); ok {
			if v.Alloc == nil {
				v.Alloc, v.Reserved = new(uint64), new(uint64)
			}
			*v.Alloc += alloc
			*v.Reserved += res
		}
	}
	sort.Slice(out, func(x, y int) bool {
		if out[x].Group != out[y].Group {
			return out[x].Group < out[y].Group
		}
		return out[x].Rank < out[y].Rank
	})
	return out
}

// isThisNode reports whether a process whose environment names node (""
// when it names none) runs on this agent's node.
func (c *Config) isThisNode(node string) bool {
	if node == "" || node == c.Node {
		return true
	}
	for _, n := range c.NodeAliases {
		if n == node {
			return true
		}
	}
	return false
}
