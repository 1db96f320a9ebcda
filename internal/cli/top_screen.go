package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/vramguard/vramguard/internal/attrib"
	"github.com/vramguard/vramguard/internal/gpu"
	"github.com/vramguard/vramguard/internal/sampler"
	"github.com/vramguard/vramguard/internal/timeline"
	"github.com/vramguard/vramguard/internal/units"
)

// topRow is one selectable line of the job table: a job, or one of an
// expanded job's processes.
type topRow struct {
	job  *attrib.Job
	proc *attrib.Process
}

// topScreen draws what both the live screen and --once show: the device
// bars and the job table, fitted to a width.
type topScreen struct {
	st *topStyles
	// width is the terminal's width; 0 draws everything at its natural width.
	width int
	smp   *sampler.Reading
	rows  []topRow
	group bool
	// filter is the filter the rows passed ("" none), for the empty list's line.
	filter string
	// expanded marks the jobs listed with their processes; markers draws
	// ▸/▾ before each job (the live screen) and cursor is the selected row
	// (-1: none).
	expanded map[string]bool
	markers  bool
	cursor   int
	// history gives a job's points for the HISTORY column; nil leaves the
	// column out (--once has one sample).
	history func(key string) []timeline.Point
}

const (
	colGPU topCol = iota
	colPID
	colUser
	colJob
	colOwner
	colMem
	colSM
	colAlloc
	colRSS
	colHist
	colFlags
	numTopCols
)

const (
	topGap         = 2  // spaces between columns
	jobMinWidth    = 24 // JOB and OWNER shrink to these before a column is dropped
	ownerMinWidth  = 16
	jobPrefWidth   = 48 // and grow to these before taking what is left
	ownerPrefWidth = 40
	histWidth      = 12
	userWidth      = 12 // a longer user name is cut (ending in …)

	devBarMax   = 30 // a device's memory bar: its width with room to spare
	devBarMin   = 10 // what it shrinks to before the device name is cut
	devBarLeast = 4
	devNameMin  = 8
)

func (sc *topScreen) devices() map[string]gpu.Device {
	m := make(map[string]gpu.Device, len(sc.smp.Devices))
	for _, d := range sc.smp.Devices {
		m[d.UUID] = d
	}
	return m
}

// deviceLines draws one line per device: its memory bar, used / total,
// the share used and its utilisation. A narrow terminal shrinks the bar,
// then cuts the device name, then leaves the name out.
func (sc *topScreen) deviceLines() []string {
	devs := sc.smp.Devices
	if len(devs) == 0 {
		return []string{"no GPUs"}
	}
	labelW, nameW, usedW, totalW, utilW := 0, 0, 0, 0, 0
	utils := make([]string, len(devs))
	for i, d := range devs {
		labelW = max(labelW, cellWidth(deviceLabel(d)))
		nameW = max(nameW, cellWidth(d.Name))
		usedW = max(usedW, len(units.FormatBytesFixed(d.UsedBytes)))
		totalW = max(totalW, len(units.FormatBytesFixed(d.TotalBytes)))
		utils[i] = "util -"
		if d.UtilPercent >= 0 {
			utils[i] = fmt.Sprintf("util %d%%", d.UtilPercent)
		}
		utilW = max(utilW, len(utils[i]))
	}
	// label name [bar] used / total pct  util
	fixed := labelW + 1 + 2 + 1 + usedW + 3 + totalW + 1 + 4 + 2 + utilW
	bar, name := devBarMax, nameW
	if sc.width > 0 {
		room := sc.width - fixed - 1 // the space after the name
		switch {
		case room >= nameW+devBarMax:
		case room >= nameW+devBarMin:
			bar = room - nameW
		case room >= devNameMin+devBarMin:
			bar, name = devBarMin, room-devBarMin
		default:
			bar, name = max(devBarLeast, room+1), 0
		}
	}
	st := sc.st
	out := make([]string, 0, len(devs))
	for i, d := range devs {
		pct := 0.0
		if d.TotalBytes > 0 {
			pct = float64(d.UsedBytes) / float64(d.TotalBytes) * 100
		}
		n := min(bar, int(pct/100*float64(bar)+0.5))
		ls := st.loadStyle(pct, memLight, memHeavy)
		var b strings.Builder
		b.WriteString(topPadRight(deviceLabel(d), labelW) + " ")
		if name > 0 {
			b.WriteString(topPadRight(truncateCells(d.Name, name), name) + " ")
		}
		b.WriteString("[" + ls.Render(strings.Repeat("█", n)) + st.dim.Render(strings.Repeat("░", bar-n)) + "] ")
		b.WriteString(topPadLeft(units.FormatBytesFixed(d.UsedBytes), usedW) + " / " + topPadRight(units.FormatBytesFixed(d.TotalBytes), totalW) + " ")
		b.WriteString(ls.Render(fmt.Sprintf("%3.0f%%", pct)) + "  ")
		if d.UtilPercent >= 0 {
			b.WriteString(st.loadStyle(float64(d.UtilPercent), utilLight, utilHeavy).Render(utils[i]))
		} else {
			b.WriteString(utils[i])
		}
		out = append(out, sc.fitLine(b.String()))
	}
	return out
}

// footer says what the table cannot show: GPU memory of PIDs not in
// /proc, scrambled driver records.
func (sc *topScreen) footer() []string {
	var out []string
	s := sc.smp
	if len(s.Attrib.Vanished) > 0 {
		out = append(out, topWrap(fmt.Sprintf("%s holding %s belong to PIDs not in /proc, owner unknown (exited, hidden by hidepid, or in a PID namespace this /proc cannot see)",
			topPlural(len(s.Attrib.Vanished), "GPU record"), units.FormatBytes(s.Attrib.VanishedBytes)), sc.width)...)
	}
	if n := s.Dropped.Total(); n > 0 {
		out = append(out, topWrap(fmt.Sprintf("%s dropped (bad PID %d, more than the device %d, unknown device %d)",
			topPlural(n, "scrambled driver record"), s.Dropped.BadPID, s.Dropped.OverDevice, s.Dropped.UnknownDevice), sc.width)...)
	}
	return out
}

// emptyLine is what the table says when it has no rows.
func (sc *topScreen) emptyLine() string {
	if sc.filter != "" {
		return "no job matches the filter " + strconv.Quote(sc.filter)
	}
	return "no GPU processes"
}

// topPlural says n things: "1 job", "2 jobs".
func topPlural(n int, one string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + one + "s"
}

// writeTopOnce prints the screen once (top --once without --json).
func writeTopOnce(w io.Writer, sc *topScreen) error {
	if len(sc.smp.Devices) == 0 && len(sc.rows) == 0 {
		_, err := fmt.Fprintln(w, "no GPUs")
		return err
	}
	var b strings.Builder
	for _, l := range sc.deviceLines() {
		b.WriteString(l + "\n")
	}
	b.WriteString("\n")
	if len(sc.rows) == 0 {
		b.WriteString(sc.emptyLine() + "\n")
	} else {
		head, body, _ := sc.table()
		b.WriteString(head + "\n")
		for _, l := range body {
			b.WriteString(l + "\n")
		}
	}
	if f := sc.footer(); len(f) > 0 {
		b.WriteString("\n" + strings.Join(f, "\n") + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}
