package usage

import (
	"cmp"
	"slices"
	"time"

	"github.com/vramguard/vramguard/internal/timeline"
)

// GroupJob is one job of a distributed job (its group: the Slurm job id,
// run --group's name) on one node, with its stored history: a Slurm task
// under its own vramguard run holds one rank, torchrun per node several.
type GroupJob struct {
	Job
	Node  string
	Ranks []int
	// GPUTotal is the total memory of the GPUs the job held memory on;
	// MemRequest the host memory the job asked for on its node (Slurm's
	// SLURM_MEM_PER_NODE, or SLURM_MEM_PER_CPU times the node's CPUs;
	// 0: none asked).
	GPUTotal   int64
	MemRequest int64
}

// RankUsage is one job of the group on a node: its ranks' efficiency as
// seff and jobstats show it, with the GPU memory they leave out.
type RankUsage struct {
	Node  string `json:"node"`
	Ranks []int  `json:"ranks"`
	Job   string `json:"job_key"`
	Name  string `json:"name"`
	// GPUPeakBytes is the most GPU memory it held at once, against
	// GPUTotalBytes, the memory of the GPUs it held memory on
	// (GPUPeakFraction: their ratio; 0 without a total).
	GPUPeakBytes    int64   `json:"gpu_peak_bytes"`
	GPUTotalBytes   int64   `json:"gpu_total_bytes"`
	GPUPeakFraction float64 `json:"gpu_peak_fraction"`
	// HeldHours, BusyHours and IdleHours are as Row's: the time GPU
	// memory was held, busy at or above the idle threshold's utilisation,
	// idle under it.
	HeldHours float64 `json:"held_hours"`
	BusyHours float64 `json:"busy_hours"`
	IdleHours float64 `json:"idle_hours"`
	// HostPeakBytes is its highest host memory (the RSS of its processes
	// summed, as the agent sampled it).
	HostPeakBytes int64 `json:"host_peak_bytes"`
}

// NodeUsage is the group on one node.
type NodeUsage struct {
	Node  string `json:"node"`
	Ranks []int  `json:"ranks"`
	// GPUPeakBytes and HostPeakBytes are the most the node's jobs held
	// together at one sample; HostRequestBytes what the job asked for on
	// the node (0: nothing asked) and HostPeakFraction their ratio (0
	// without a request).
	GPUPeakBytes     int64   `json:"gpu_peak_bytes"`
	HostPeakBytes    int64   `json:"host_peak_bytes"`
	HostRequestBytes int64   `json:"host_request_bytes"`
	HostPeakFraction float64 `json:"host_peak_fraction"`
	// HeldHours, BusyHours and IdleHours sum the node's jobs' (GPU-hours
	// where its jobs ran at once).
	HeldHours float64 `json:"held_hours"`
	BusyHours float64 `json:"busy_hours"`
	IdleHours float64 `json:"idle_hours"`
}

// GroupReport is the efficiency of one distributed job over a range: per
// node, and per rank (each job of it) on each node.
type GroupReport struct {
	Group string      `json:"group"`
	From  time.Time   `json:"from"`
	To    time.Time   `json:"to"`
	Nodes []NodeUsage `json:"nodes"`
	Ranks []RankUsage `json:"ranks"`
}

// ComputeGroup sums the group's jobs; threshold is the utilisation
// (percent) under which held memory counts idle. Ranks are ordered by
// node, then first rank; nodes by name.
func ComputeGroup(group string, jobs []GroupJob, threshold int, from, to time.Time) GroupReport {
	rep := GroupReport{Group: group, From: from, To: to, Nodes: []NodeUsage{}, Ranks: []RankUsage{}}
	type nodeSums struct {
		n         NodeUsage
		gpu, host map[int64]int64 // by sample time
	}
	nodes := map[string]*nodeSums{}
	for _, j := range jobs {
		r := jobRow(j.Job, threshold)
		ru := RankUsage{Node: j.Node, Ranks: slices.Clone(j.Ranks), Job: j.Key, Name: j.Name, GPUPeakBytes: r.PeakBytes, GPUTotalBytes: j.GPUTotal,
			HeldHours: r.HeldHours, BusyHours: r.BusyHours, IdleHours: r.IdleHours}
		if j.GPUTotal > 0 {
			ru.GPUPeakFraction = float64(r.PeakBytes) / float64(j.GPUTotal)
		}
		ns := nodes[j.Node]
		if ns == nil {
			ns = &nodeSums{n: NodeUsage{Node: j.Node}, gpu: map[int64]int64{}, host: map[int64]int64{}}
			nodes[j.Node] = ns
		}
		each(j.Job, func(p timeline.Point, _ float64) {
			ru.HostPeakBytes = max(ru.HostPeakBytes, p.RSS)
			ns.gpu[p.T] += max(p.GPU, 0)
			ns.host[p.T] += max(p.RSS, 0)
		})
		ns.n.Ranks = append(ns.n.Ranks, j.Ranks...)
		ns.n.HostRequestBytes = max(ns.n.HostRequestBytes, j.MemRequest)
		ns.n.HeldHours += r.HeldHours
		ns.n.BusyHours += r.BusyHours
		ns.n.IdleHours += r.IdleHours
		rep.Ranks = append(rep.Ranks, ru)
	}
	for _, ns := range nodes {
		for _, v := range ns.gpu {
			ns.n.GPUPeakBytes = max(ns.n.GPUPeakBytes, v)
		}
		for _, v := range ns.host {
			ns.n.HostPeakBytes = max(ns.n.HostPeakBytes, v)
		}
		if ns.n.HostRequestBytes > 0 {
			ns.n.HostPeakFraction = float64(ns.n.HostPeakBytes) / float64(ns.n.HostRequestBytes)
		}
		slices.Sort(ns.n.Ranks)
		ns.n.Ranks = slices.Compact(ns.n.Ranks)
		rep.Nodes = append(rep.Nodes, ns.n)
	}
	sortByNode(rep.Nodes, rep.Ranks)
	return rep
}

// MergeGroup joins the reports of one group from several nodes' agents.
func MergeGroup(reps []GroupReport) GroupReport {
	var out GroupReport
	for i, r := range reps {
		if i == 0 {
			out = GroupReport{Group: r.Group, From: r.From, To: r.To, Nodes: []NodeUsage{}, Ranks: []RankUsage{}}
		}
		out.Nodes = append(out.Nodes, r.Nodes...)
		out.Ranks = append(out.Ranks, r.Ranks...)
	}
	sortByNode(out.Nodes, out.Ranks)
	return out
}

// sortByNode orders a report's nodes by name and its ranks by node, then
// by their first rank; entries alike keep their order.
func sortByNode(nodes []NodeUsage, ranks []RankUsage) {
	slices.SortStableFunc(nodes, func(a, b NodeUsage) int { return cmp.Compare(a.Node, b.Node) })
	slices.SortStableFunc(ranks, func(a, b RankUsage) int {
		if c := cmp.Compare(a.Node, b.Node); c != 0 {
			return c
		}
		return cmp.Compare(first(a.Ranks), first(b.Ranks))
	})
}

func first(xs []int) int {
	if len(xs) == 0 {
		return -1
	}
	return xs[0]
}
