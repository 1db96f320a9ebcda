package postmortem

import (
	"fmt"

	"github.com/vramguard/vramguard/internal/ranks"
)

// RankCells are the cells of a rank's row in a ranks table (explain's, and
// explain --group's across nodes), each "-" where it is unknown.
type RankCells struct {
	PID  string
	Exit string // the exit code, with the signal that ended the rank
	// Reason is the rank's reason code.
	Reason string
	Steps  string // optimizer steps
	Node   string // cut to 10 runes
	// PeakHost and PeakGPU are the rank's memory peaks.
	PeakHost, PeakGPU string
	LastLine          string // cut to 72 runes
}

// CellsOf returns r's cells.
func CellsOf(r ranks.Rank) RankCells {
	c := RankCells{PID: "-", Exit: "-", Reason: r.Reason, Steps: "-", Node: truncRunes(r.Node, 10),
		PeakHost: bytesOrDash(r.PeakHostBytes), PeakGPU: bytesOrDash(r.PeakGPUBytes), LastLine: truncRunes(r.LastLine, 72)}
	if r.PID > 0 {
		c.PID = fmt.Sprint(r.PID)
	}
	if r.ExitCode != nil {
		c.Exit = fmt.Sprint(*r.ExitCode)
		if r.Signal != nil {
			c.Exit += " (" + *r.Signal + ")"
		}
	}
	if c.Reason == "" {
		c.Reason = "-"
	}
	if r.OptimizerSteps != nil {
		c.Steps = fmt.Sprint(*r.OptimizerSteps)
	}
	if c.Node == "" {
		c.Node = "-"
	}
	return c
}
