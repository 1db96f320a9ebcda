package supervise

import (
	"slices"
	"testing"
)

// jobEnv adds the run's id and attempt to the job's environment, replacing
// an outer run's, and makes Python's output unbuffered unless the user chose.
func TestJobEnv(t *testing.T) {
	ids := []string{"VRAMGUARD_RUN_ID=r1", "VRAMGUARD_ATTEMPT=2"}
	for _, tc := range []struct {
		name       string
		base, want []string
	}{
		{"unbuffered added", []string{"HOME=/h"}, append([]string{"HOME=/h", "PYTHONUNBUFFERED=1"}, ids...)},
		{"an empty PYTHONUNBUFFERED is set", []string{"PYTHONUNBUFFERED="}, append([]string{"PYTHONUNBUFFERED=1"}, ids...)},
		{"the user's PYTHONUNBUFFERED kept", []string{"PYTHONUNBUFFERED=0"}, append([]string{"PYTHONUNBUFFERED=0"}, ids...)},
		{"an outer run's ids replaced", []string{"VRAMGUARD_RUN_ID=outer", "VRAMGUARD_ATTEMPT=7", "PYTHONUNBUFFERED=1"},
			append([]string{"PYTHONUNBUFFERED=1"}, ids...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := slices.Clone(tc.base)
			if got := jobEnv(base, "r1", 2); !slices.Equal(got, tc.want) {
				t.Errorf("jobEnv(%q) = %q, want %q", tc.base, got, tc.want)
			}
			if !slices.Equal(base, tc.base) {
				t.Errorf("jobEnv changed its base: %q", base)
			}
		})
	}
}
