package diagnose

import (
	"testing"
	"time"
)

func TestSlurmDeadline(t *testing.T) {
	for _, tt := range []struct {
		env  string
		want time.Time
	}{
		{"1764756672", time.Unix(1764756672, 0)},
		{" 1764756672\n", time.Unix(1764756672, 0)},
		{"", time.Time{}},
		{"Unknown", time.Time{}},
		{"0", time.Time{}},
	} {
		got := SlurmDeadline(func(k string) string {
			if k == "SLURM_JOB_END_TIME" {
				return tt.env
			}
			return "999"
		})
		if !got.Equal(tt.want) {
			t.Errorf("SLURM_JOB_END_TIME=%q: %v, want %v", tt.env, got, tt.want)
		}
	}
}

// TestEndedFromOutside: the scheduler's reasons and a person's stop are ends
// no process of the job caused; failures are not.
func TestEndedFromOutside(t *testing.T) {
	for _, r := range Reasons {
		want := r == Interrupted || r == Restarted || r == TimeLimit || r == Preempted || r == Cancelled || r == NodeFailure
		if EndedFromOutside(r) != want {
			t.Errorf("EndedFromOutside(%s) = %v", r, !want)
		}
	}
}
