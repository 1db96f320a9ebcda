package postmortem

import (
	"strings"
	"testing"

	"github.com/vramguard/vramguard/internal/ranks"
)

func TestCellsOf(t *testing.T) {
	code, sig, steps, peak := 137, "SIGKILL", int64(1200), uint64(3<<30)
	long := strings.Repeat("é", 80)
	for _, tt := range []struct {
		name string
		r    ranks.Rank
		want RankCells
	}{
		{"nothing known", ranks.Rank{},
			RankCells{PID: "-", Exit: "-", Reason: "-", Steps: "-", Node: "-", PeakHost: "-", PeakGPU: "-", LastLine: ""}},
		{"all known", ranks.Rank{PID: 4242, ExitCode: &code, Signal: &sig, Reason: "oom_killed", OptimizerSteps: &steps,
			Node: "gpu-node-0001", PeakHostBytes: &peak, PeakGPUBytes: &peak, LastLine: long},
			RankCells{PID: "4242", Exit: "137 (SIGKILL)", Reason: "oom_killed", Steps: "1200", Node: "gpu-node-…",
				PeakHost: "3 GiB", PeakGPU: "3 GiB", LastLine: strings.Repeat("é", 71) + "…"}},
		{"an exit without a signal", ranks.Rank{ExitCode: &code, Node: "n1", LastLine: "step 3"},
			RankCells{PID: "-", Exit: "137", Reason: "-", Steps: "-", Node: "n1", PeakHost: "-", PeakGPU: "-", LastLine: "step 3"}},
	} {
		if got := CellsOf(tt.r); got != tt.want {
			t.Errorf("%s: CellsOf = %+v\nwant %+v", tt.name, got, tt.want)
		}
	}
}
