package ranks

import (
	"testing"
)

func ip(n int) *int { return &n }

func TestFromEnv(t *testing.T) {
	tests := []struct {
		name string
		env  []string
		want *Identity
	}{
		{"torchrun", []string{"PATH=/bin", "RANK=5", "LOCAL_RANK=1", "WORLD_SIZE=8", "GROUP_RANK=2", "LOCAL_WORLD_SIZE=4", "TORCHELASTIC_RUN_ID=x"},
			&Identity{Rank: 5, LocalRank: ip(1), WorldSize: ip(8), NodeRank: ip(2), Source: SourceTorchrun}},
		{"plain launcher, no local rank", []string{"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1"},
			&Identity{Rank: 0, WorldSize: ip(2), Source: SourceTorchrun}},
		{"Lightning's NODE_RANK", []string{"RANK=3", "NODE_RANK=1"},
			&Identity{Rank: 3, NodeRank: ip(1), Source: SourceTorchrun}},
		{"srun", []string{"SLURM_PROCID=7", "SLURM_LOCALID=3", "SLURM_NTASKS=16", "SLURM_NODEID=1", "SLURM_JOB_ID=99"},
			&Identity{Rank: 7, LocalRank: ip(3), WorldSize: ip(16), NodeRank: ip(1), Source: SourceSlurm}},
		{"torchrun under srun: RANK wins, SLURM_NODEID is the node", []string{"SLURM_PROCID=1", "SLURM_NTASKS=2", "SLURM_NODEID=1", "RANK=6", "LOCAL_RANK=2", "WORLD_SIZE=8"},
			&Identity{Rank: 6, LocalRank: ip(2), WorldSize: ip(8), NodeRank: ip(1), Source: SourceTorchrun}},
		{"Open MPI", []string{"OMPI_COMM_WORLD_RANK=2", "OMPI_COMM_WORLD_LOCAL_RANK=0", "OMPI_COMM_WORLD_SIZE=4"},
			&Identity{Rank: 2, LocalRank: ip(0), WorldSize: ip(4), Source: SourceOpenMPI}},
		{"PMI", []string{"PMI_RANK=1", "PMI_SIZE=2", "MPI_LOCALRANKID=1"},
			&Identity{Rank: 1, LocalRank: ip(1), WorldSize: ip(2), Source: SourcePMI}},
		{"the last assignment counts", []string{"RANK=1", "RANK=2"}, &Identity{Rank: 2, Source: SourceTorchrun}},
		{"a rank outside its world keeps no world", []string{"RANK=4", "WORLD_SIZE=4"}, &Identity{Rank: 4, Source: SourceTorchrun}},
		{"not a number", []string{"RANK=zero", "WORLD_SIZE=2"}, nil},
		{"negative", []string{"RANK=-1"}, nil},
		{"empty", []string{"RANK="}, nil},
		{"a prefix is not the variable", []string{"MYRANK=1", "RANKS=2", "XRANK=3"}, nil},
		{"nothing", []string{"HOME=/root"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := FromEnv(tt.env)
			if (tt.want != nil) != ok {
				t.Fatalf("ok %v, want %v (%+v)", ok, tt.want != nil, got)
			}
			if tt.want == nil {
				return
			}
			if got.String() != tt.want.String() || got.Source != tt.want.Source || !eqp(got.LocalRank, tt.want.LocalRank) ||
				!eqp(got.WorldSize, tt.want.WorldSize) || !eqp(got.NodeRank, tt.want.NodeRank) {
				t.Errorf("got %s %+v, want %s %+v", got, got, tt.want, *tt.want)
			}
		})
	}
}

func eqp(a, b *int) bool { return (a == nil && b == nil) || (a != nil && b != nil && *a == *b) }

func TestReadEnv(t *testing.T) {
	e := ReadEnv([]string{"RANK=1", "SLURMD_NODENAME=gpu-07", "TORCHELASTIC_ERROR_FILE=/tmp/te/0/1/error.json"})
	if e.Identity == nil || e.Identity.Rank != 1 || e.Node != "gpu-07" || e.ErrorFile != "/tmp/te/0/1/error.json" {
		t.Errorf("%+v", e)
	}
	if e := ReadEnv([]string{"PATH=/bin"}); e.Identity != nil || e.Node != "" || e.ErrorFile != "" {
		t.Errorf("no rank: %+v", e)
	}
	if got := NodeName(nil, "host-a"); got != "host-a" {
		t.Errorf("NodeName without Slurm: %q", got)
	}
}

func TestIdentityString(t *testing.T) {
	for _, tt := range []struct {
		id   Identity
		want string
	}{
		{Identity{Rank: 2}, "rank 2"},
		{Identity{Rank: 2, LocalRank: ip(2), WorldSize: ip(4)}, "rank 2 (of 4)"},
		{Identity{Rank: 6, LocalRank: ip(2), NodeRank: ip(1), WorldSize: ip(8)}, "rank 6 (local rank 2, node 1, of 8)"},
	} {
		if got := tt.id.String(); got != tt.want {
			t.Errorf("%q, want %q", got, tt.want)
		}
	}
}
