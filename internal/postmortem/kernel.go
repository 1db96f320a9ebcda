package postmortem

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/vramguard/vramguard/internal/timeline"
	"github.com/vramguard/vramguard/internal/units"
)

// MaxCells is how many of an attempt's cells its post-mortem keeps (the
// newest; CellsTotal counts them all).
const MaxCells = 50

// Kernel is what a notebook kernel's attempt ran, from the probe's cell
// messages: its cells, the one running when the attempt ended, and the
// newest autosave then. Null for a job that is no notebook kernel.
type Kernel struct {
	// Cells are the attempt's newest cells, oldest first, the running one
	// last.
	Cells      []Cell `json:"cells"`
	CellsTotal int    `json:"cells_total"`
	// Running is the cell that was running when the attempt ended (a
	// cell_start without its cell), null when none was.
	Running *Cell `json:"running"`
	// Autosave is the newest autosave of the notebook when the attempt
	// ended (this attempt's or an earlier kernel's), null when none.
	Autosave *Autosave `json:"autosave"`
}

// Cell is one cell of a kernel's attempt.
type Cell struct {
	timeline.CellData
	// HostGrowth is how much the kernel's host memory grew during the
	// cell as the supervisor sampled it (its process tree's RSS, summed):
	// the highest sample during the cell less the last one before it.
	// Null when no sample fell in the cell (it was shorter than the sample
	// interval).
	HostGrowth *int64 `json:"host_growth_bytes"`
}

// Autosave is a notebook's autosave file.
type Autosave struct {
	Path    string    `json:"path"`
	T       time.Time `json:"t"`
	Objects []string  `json:"objects"`
	Bytes   int64     `json:"bytes"`
	// AgeS is how old it was when the attempt ended.
	AgeS float64 `json:"age_s"`
}

// RunningLine says which cell was running when the kernel ended and how
// much host memory it had added by then: "In[12] was running (+3.1 GiB
// since it started)"; "" when none was.
func (k *Kernel) RunningLine() string {
	if k == nil || k.Running == nil {
		return ""
	}
	s := fmt.Sprintf("In[%d] was running", k.Running.ExecutionCount)
	if g := k.Running.HostGrowth; g != nil {
		s += fmt.Sprintf(" (%s since it started)", signedBytes(*g))
	}
	return s
}

// AutosaveLine names the newest autosave and its age at the end: "the
// newest autosave (model, opt) is 4m12s old: /w/autosave-....pt"; "" when
// there is none.
func (k *Kernel) AutosaveLine() string {
	if k == nil || k.Autosave == nil {
		return ""
	}
	a := k.Autosave
	what := "the newest autosave"
	if len(a.Objects) > 0 {
		what += " (" + strings.Join(a.Objects, ", ") + ")"
	}
	return fmt.Sprintf("%s was %s old: %s", what, FormatSeconds(max(a.AgeS, 0)), a.Path)
}

func signedBytes(b int64) string {
	if b < 0 {
		return "-" + units.FormatBytes(uint64(-b))
	}
	return "+" + units.FormatBytes(uint64(b))
}

// renderKernel writes a kernel attempt's cells, newest last, with what
// each changed, the running one marked.
func renderKernel(w io.Writer, k *Kernel, attempt int) {
	fmt.Fprintf(w, "\ncells (attempt %d, %d in all", attempt, k.CellsTotal)
	if len(k.Cells) < k.CellsTotal {
		fmt.Fprintf(w, ", the last %d", len(k.Cells))
	}
	fmt.Fprintln(w, ")")
	for _, c := range k.Cells {
		growth := "-"
		if c.HostGrowth != nil {
			growth = signedBytes(*c.HostGrowth)
		}
		state := FormatSeconds(c.Seconds)
		if c.End == nil {
			state = "running"
		}
		line := fmt.Sprintf("  In[%d]  %-8s host %-10s sampled %-10s", c.ExecutionCount, state, changeOrDash(c), growth)
		for _, d := range c.CUDA {
			line += fmt.Sprintf(" cuda:%d %s (peak %s)", d.Device, signedBytes(d.AllocatedDelta), signedBytes(d.AllocatedPeakDelta))
		}
		if c.Error != "" {
			line += "  raised " + c.Error
		}
		fmt.Fprintf(w, "%s  %s\n", line, truncRunes(c.FirstLine, 60))
	}
	if l := k.AutosaveLine(); l != "" {
		fmt.Fprintf(w, "  %s\n", l)
	}
}

// changeOrDash is a cell's own host figure (the probe's: end less start),
// "-" while it runs.
func changeOrDash(c Cell) string {
	if c.End == nil {
		return "-"
	}
	return signedBytes(c.RSSDelta)
}
