package ranks

import "testing"

// TestPlaceFromEnvPrecedence: the group is VRAMGUARD_GROUP, else
// SLURM_JOB_ID, else TORCHELASTIC_RUN_ID (not torchrun's default "none");
// the node VRAMGUARD_NODE, else SLURMD_NODENAME; a process that names no
// rank has no place.
func TestPlaceFromEnvPrecedence(t *testing.T) {
	for _, c := range []struct {
		env         []string
		group, node string
		ok          bool
	}{
		{[]string{"RANK=1", "VRAMGUARD_GROUP=g", "SLURM_JOB_ID=77", "TORCHELASTIC_RUN_ID=r"}, "g", "", true},
		{[]string{"RANK=1", "SLURM_JOB_ID=77", "TORCHELASTIC_RUN_ID=r", "SLURMD_NODENAME=n1"}, "77", "n1", true},
		{[]string{"RANK=1", "TORCHELASTIC_RUN_ID=r", "VRAMGUARD_NODE=a", "SLURMD_NODENAME=n1"}, "r", "a", true},
		// torchrun's default --rdzv-id names no job
		{[]string{"RANK=1", "TORCHELASTIC_RUN_ID=none"}, "", "", true},
		// an empty VRAMGUARD_GROUP falls through to Slurm's job id
		{[]string{"SLURM_PROCID=3", "VRAMGUARD_GROUP=", "SLURM_JOB_ID=77"}, "77", "", true},
		{[]string{"VRAMGUARD_GROUP=g"}, "", "", false},
	} {
		p := PlaceFromEnv(c.env)
		if (p.ID != nil) != c.ok || p.Group != c.group || p.Node != c.node {
			t.Errorf("%v: group %q node %q has rank %v, want %q %q %v", c.env, p.Group, p.Node, p.ID != nil, c.group, c.node, c.ok)
		}
	}
}

func TestMemRequest(t *testing.T) {
	for _, tt := range []struct {
		env  []string
		want uint64
	}{
		{[]string{"SLURM_MEM_PER_NODE=4096"}, 4 << 30},
		{[]string{"SLURM_MEM_PER_CPU=1000", "SLURM_CPUS_ON_NODE=3"}, 3000 << 20},
		{[]string{"SLURM_MEM_PER_NODE=2048", "SLURM_MEM_PER_CPU=1000", "SLURM_CPUS_ON_NODE=3"}, 2 << 30},
		{[]string{"SLURM_MEM_PER_CPU=1000"}, 0},
		{[]string{"SLURM_MEM_PER_NODE=lots"}, 0},
		{nil, 0},
	} {
		if got := MemRequest(tt.env); got != tt.want {
			t.Errorf("MemRequest(%q) = %d, want %d", tt.env, got, tt.want)
		}
	}
	p := PlaceFromEnv([]string{"SLURM_PROCID=1", "SLURM_JOB_ID=9", "SLURM_MEM_PER_NODE=512"})
	if p.MemRequest != 512<<20 || p.Group != "9" {
		t.Errorf("place %+v", p)
	}
}
