package cli

import "testing"

func TestSlurmTask(t *testing.T) {
	tests := []struct {
		name     string
		env      map[string]string
		task     string
		requeued bool
	}{
		{"outside Slurm", map[string]string{"SLURM_PROCID": "1"}, "", false},
		{"first start", map[string]string{"SLURM_JOB_ID": "42", "SLURM_PROCID": "3"}, "42.3", false},
		{"restart count 0", map[string]string{"SLURM_JOB_ID": "42", "SLURM_PROCID": "0", "SLURM_RESTART_COUNT": "0"}, "42.0", false},
		{"requeued", map[string]string{"SLURM_JOB_ID": "42", "SLURM_PROCID": "1", "SLURM_RESTART_COUNT": "2"}, "42.1", true},
		{"no task id (the batch script)", map[string]string{"SLURM_JOB_ID": "42", "SLURM_RESTART_COUNT": "1"}, "42.0", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			task, requeued := slurmTask(func(k string) string { return tt.env[k] })
			if task != tt.task || requeued != tt.requeued {
				t.Errorf("slurmTask = %q, %v; want %q, %v", task, requeued, tt.task, tt.requeued)
			}
		})
	}
}
