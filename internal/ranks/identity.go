// Package ranks knows the processes of a distributed job by their place in
// it, and tells the rank that failed first from the ranks its failure took
// down.
//
// A process's identity (Identity) comes from the environment its launcher
// gave it (torchrun's RANK/LOCAL_RANK/WORLD_SIZE/GROUP_RANK, Slurm's
// SLURM_PROCID/SLURM_LOCALID/SLURM_NTASKS/SLURM_NODEID, Open MPI's and
// PMI's variables) or from torch.distributed itself, as the in-process
// probe reports it once the process group exists (mp.spawn passes the rank
// as an argument, not in the environment). Judge reads how each rank ended
// (exit status and time, what it printed, what the probe and the launcher
// reported) and names the root cause: the rank that failed first, with its
// own reason, and the ranks that ended because of it (peer_failed).
package ranks

import (
	"strconv"
	"strings"
	"time"
)

// Sources of an identity (Identity.Source).
const (
	SourceTorchrun = "env RANK"         // torchrun, torch.distributed.launch, accelerate, Lightning, a plain launcher
	SourceSlurm    = "env SLURM_PROCID" // srun
	SourceOpenMPI  = "env OMPI_COMM_WORLD_RANK"
	SourcePMI      = "env PMI_RANK"      // MPICH, Intel MPI
	SourceTorch    = "torch.distributed" // the probe: dist.get_rank() once the process group exists
)

// Identity is a process's place in a distributed job. Fields the source
// does not give are nil.
type Identity struct {
	Rank      int  `json:"rank"`
	LocalRank *int `json:"local_rank"`
	WorldSize *int `json:"world_size"`
	// NodeRank is the node's index in the job (torchrun's GROUP_RANK,
	// NODE_RANK, SLURM_NODEID).
	NodeRank *int `json:"node_rank"`
	// Source says where the rank was read (the Source constants).
	Source string `json:"source"`
}

// FromEnv reads a process's identity from its environment (KEY=VALUE
// strings, as /proc/PID/environ holds them). ok is false when no variable
// names a rank. RANK wins over Slurm's variables: torchrun under srun gives
// its workers both, and SLURM_PROCID is then the node's task, not the
// worker's rank.
func FromEnv(env []string) (id Identity, ok bool) {
	get := func(k string) (int, bool) {
		for i := len(env) - 1; i >= 0; i-- {
			if v, found := strings.CutPrefix(env[i], k+"="); found {
				n, err := strconv.Atoi(strings.TrimSpace(v))
				return n, err == nil && n >= 0
			}
		}
		return 0, false
	}
	opt := func(keys ...string) *int {
		for _, k := range keys {
			if n, ok := get(k); ok {
				return &n
			}
		}
		return nil
	}
	type scheme struct {
		source, rank string
		local, world []string
		node         []string
	}
	for _, s := range []scheme{
		{SourceTorchrun, "RANK", []string{"LOCAL_RANK"}, []string{"WORLD_SIZE"}, []string{"GROUP_RANK", "NODE_RANK", "SLURM_NODEID"}},
		{SourceOpenMPI, "OMPI_COMM_WORLD_RANK", []string{"OMPI_COMM_WORLD_LOCAL_RANK"}, []string{"OMPI_COMM_WORLD_SIZE"}, []string{"OMPI_COMM_WORLD_NODE_RANK"}},
		{SourcePMI, "PMI_RANK", []string{"MPI_LOCALRANKID", "PMI_LOCAL_RANK"}, []string{"PMI_SIZE"}, nil},
		{SourceSlurm, "SLURM_PROCID", []string{"SLURM_LOCALID"}, []string{"SLURM_NTASKS", "SLURM_NPROCS"}, []string{"SLURM_NODEID"}},
	} {
		r, ok := get(s.rank)
		if !ok {
			continue
		}
		id := Identity{Rank: r, LocalRank: opt(s.local...), WorldSize: opt(s.world...), NodeRank: opt(s.node...), Source: s.source}
		if id.WorldSize != nil && r >= *id.WorldSize {
			// a rank outside its world is not a rank this job gave
			id.WorldSize = nil
		}
		return id, true
	}
	return Identity{}, false
}

// NodeName is the name of the node a process runs on, from its environment
// (SLURMD_NODENAME, the name Slurm knows the node by), else host (the
// machine's host name).
func NodeName(env []string, host string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], "SLURMD_NODENAME="); ok && v != "" {
			return v
		}
	}
	return host
}

// ErrorFile is the path torchrun gives a worker for its error file
// (TORCHELASTIC_ERROR_FILE), "" when none.
func ErrorFile(env []string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], "TORCHELASTIC_ERROR_FILE="); ok {
			return v
		}
	}
	return ""
}

// String says the identity in words: "rank 2 (local rank 2, 4 ranks)".
func (id Identity) String() string {
	s := "rank " + strconv.Itoa(id.Rank)
	var extra []string
	if id.LocalRank != nil && *id.LocalRank != id.Rank {
		extra = append(extra, "local rank "+strconv.Itoa(*id.LocalRank))
	}
	if id.NodeRank != nil {
		extra = append(extra, "node "+strconv.Itoa(*id.NodeRank))
	}
	if id.WorldSize != nil {
		extra = append(extra, "of "+strconv.Itoa(*id.WorldSize))
	}
	if len(extra) > 0 {
		s += " (" + strings.Join(extra, ", ") + ")"
	}
	return s
}

// Probed is what the in-process probe reported of one process.
type Probed struct {
	PID int
	// Argv is its command line, as its probe said hello.
	Argv []string
	// Steps is the optimizer steps it counted; LastStep when the count last
	// rose (zero: never).
	Steps    int64
	LastStep time.Time
	// PeakRSS is the largest RSS it reported; PeakGPU PyTorch's reserved
	// peak summed over its devices (nil: it used no CUDA).
	PeakRSS uint64
	PeakGPU *uint64
	// Dist is its rank as torch.distributed knows it (nil: no process
	// group, or a forked child).
	Dist *Identity
	// Exception is the uncaught exception that ended it.
	Exception *Report
	// Ended is when its connection closed.
	Ended time.Time
}

// Env is what a process's environment says of its place in a job.
type Env struct {
	// Identity is nil when no variable names a rank.
	Identity *Identity
	// Node is SLURMD_NODENAME ("" when unset); ErrorFile is
	// TORCHELASTIC_ERROR_FILE, where torchrun's @record writes the
	// worker's uncaught exception.
	Node, ErrorFile string
}

// ReadEnv reads env (KEY=VALUE strings).
func ReadEnv(env []string) Env {
	e := Env{Node: NodeName(env, ""), ErrorFile: ErrorFile(env)}
	if id, ok := FromEnv(env); ok {
		e.Identity = &id
	}
	return e
}
