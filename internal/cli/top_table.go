// top's job table: its columns, each row's cells (GPU memory, SM, allocator, history,
// flags), the layout that fits them to the terminal (shrinking, then dropping
// columns), and the command lines of an expanded job's processes.

package cli

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/charmbracelet/lipgloss"

	"github.com/vramguard/vramguard/internal/attrib"
	"github.com/vramguard/vramguard/internal/gpu"
	"github.com/vramguard/vramguard/internal/termsafe"
	"github.com/vramguard/vramguard/internal/timeline"
	"github.com/vramguard/vramguard/internal/units"
)

// Columns of the job table, in the order they are drawn.
type topCol int

var topColHeads = [numTopCols]string{"GPU", "PID", "USER", "JOB", "OWNER", "GPU MEM", "SM", "ALLOC / RESERVED", "RSS", "HISTORY", "FLAGS"}

var topColRight = [numTopCols]bool{colPID: true, colMem: true, colSM: true, colAlloc: true, colRSS: true}

// topDropOrder is the order in which columns leave a table too wide for the
// terminal, first to go first. JOB, GPU MEM and FLAGS always stay; JOB and
// OWNER shrink (ending in …) before anything is dropped.
var topDropOrder = []topCol{colAlloc, colHist, colOwner, colSM, colUser, colRSS, colPID, colGPU}

// topDropNames says topDropOrder in words, for --help and the docs.
const topDropNames = "ALLOC / RESERVED, HISTORY, OWNER, SM, USER, RSS, PID, GPU"

// memCell is a GPU memory figure coloured by its share of the memory of
// the devices it is on.
func (sc *topScreen) memCell(bytes uint64, procs []attrib.Process, devs map[string]gpu.Device) topCell {
	if bytes == 0 {
		return plainCell("-")
	}
	var total uint64
	seen := map[string]bool{}
	for _, p := range procs {
		for _, g := range p.GPU {
			if d, ok := devs[g.DeviceUUID]; ok && !seen[g.DeviceUUID] {
				seen[g.DeviceUUID] = true
				total += d.TotalBytes
			}
		}
	}
	s := units.FormatBytesFixed(bytes)
	if total == 0 {
		return plainCell(s)
	}
	return styledCell(s, sc.st.loadStyle(float64(bytes)/float64(total)*100, memLight, memHeavy))
}

// smPercent is the SM utilisation of processes: on each device they use,
// the sum of theirs (at most 100), averaged over those devices; -1 when
// the driver reports none.
func smPercent(procs []attrib.Process) int {
	per := map[string]int{}
	for _, p := range procs {
		for _, g := range p.GPU {
			if g.SMUtilPercent >= 0 {
				per[g.DeviceUUID] = min(per[g.DeviceUUID]+g.SMUtilPercent, 100)
			}
		}
	}
	if len(per) == 0 {
		return -1
	}
	sum := 0
	for _, v := range per {
		sum += v
	}
	return (sum + len(per)/2) / len(per)
}

func (sc *topScreen) smCell(pct int) topCell {
	if pct < 0 {
		return plainCell("-")
	}
	return styledCell(fmt.Sprintf("%d%%", pct), sc.st.loadStyle(float64(pct), utilLight, utilHeavy))
}

func (sc *topScreen) flagsCell(flags []string) topCell {
	var c topCell
	for i, f := range flags {
		if i > 0 {
			c = append(c, topPart{s: ","})
		}
		var st lipgloss.Style
		switch f {
		case flagLeak, flagHostLeak, flagOOMRisk:
			st = sc.st.load[2]
		case flagCacheGrowth, flagOrphan:
			st = sc.st.load[1]
		case flagStable, flagNoLeak:
			st = sc.st.load[0]
		case flagJudging:
			st = sc.st.dim
		default:
			c = append(c, topPart{s: f})
			continue
		}
		c = append(c, topPart{s: f, st: &st})
	}
	return c
}

func topAllocLabel(j attrib.Job) string {
	if j.AllocatedBytes == nil {
		return "-"
	}
	return units.FormatBytesFixed(*j.AllocatedBytes) + " / " + units.FormatBytesFixed(*j.ReservedBytes)
}

// topJobCut says how a JOB cell too long for its column is shortened:
// to short (a pod's namespace/name without its command) when that fits,
// and keeping suffix (the process count) when it is cut.
type topJobCut struct{ short, suffix string }

// cells fills a row's cells.
func (sc *topScreen) cells(r topRow, devs map[string]gpu.Device) (c [numTopCols]topCell, cut topJobCut) {
	if p := r.proc; p != nil {
		one := []attrib.Process{*p}
		c = [numTopCols]topCell{
			colGPU: plainCell(gpuLabel(one, devs)), colPID: plainCell(strconv.Itoa(p.PID)),
			colUser: plainCell(truncateCells(p.User, userWidth)),
			colJob:  plainCell(procLabel(*p)),
			colMem:  sc.memCell(p.GPUBytes, one, devs), colSM: sc.smCell(smPercent(one)),
			colRSS: plainCell(units.FormatBytesFixed(p.RSSBytes)),
		}
		return c, cut
	}
	j := r.job
	if len(j.Processes) > 1 {
		cut.suffix = fmt.Sprintf(" [%d]", len(j.Processes))
	}
	c = [numTopCols]topCell{
		colGPU: plainCell(gpuLabel(j.Processes, devs)), colPID: plainCell(strconv.Itoa(j.RootPID)),
		colUser: plainCell(truncateCells(j.User, userWidth)),
		colJob:  plainCell(jobLabel(*j) + cut.suffix), colOwner: plainCell(ownerLabel(*j)),
		colMem: sc.memCell(j.GPUBytes, j.Processes, devs), colSM: sc.smCell(smPercent(j.Processes)),
		colAlloc: plainCell(topAllocLabel(*j)), colRSS: plainCell(units.FormatBytesFixed(j.RSSBytes)),
		colFlags: sc.flagsCell(jobFlags(j, sc.smp)),
	}
	if sc.history != nil {
		c[colHist] = plainCell(sparkline(sc.history(j.Key), histWidth))
	}
	if j.Kind == attrib.KindPod && j.Context.PodName != "" {
		cut.short = j.Context.PodRef()
	}
	return c, cut
}

// topLayout is which columns a table shows and how wide each is.
type topLayout struct {
	show  [numTopCols]bool
	width [numTopCols]int
}

// layoutTable fits the columns to the screen: every shown column is as
// wide as its widest value (so no figure is ever cut), JOB and OWNER take
// what is left, and while that is too little the columns of topDropOrder
// leave one by one.
func (sc *topScreen) layoutTable(indent int, rows [][numTopCols]topCell, cuts []topJobCut, procRow []bool) topLayout {
	var l topLayout
	jobsIdeal := cellWidth(topColHeads[colJob]) // JOB's width over the jobs' rows alone
	jobMin := jobMinWidth                       // and the least it takes: a pod's namespace/name stays whole
	for _, c := range cuts {
		if c.short != "" {
			jobMin = max(jobMin, min(cellWidth(c.short+c.suffix), jobPrefWidth))
		}
	}
	for c := range numTopCols {
		l.show[c] = true
		l.width[c] = cellWidth(topColHeads[c])
		for i, r := range rows {
			w := cellWidth(r[c].text())
			l.width[c] = max(l.width[c], w)
			if c == colJob && !procRow[i] {
				jobsIdeal = max(jobsIdeal, w)
			}
		}
	}
	if sc.history == nil {
		l.show[colHist] = false
	} else {
		l.width[colHist] = max(l.width[colHist], histWidth)
	}
	allIdeal, ownerIdeal := l.width[colJob], l.width[colOwner]
	if sc.width <= 0 {
		return l
	}
	fixed := func() (n int) {
		n = indent
		shown := 0
		for c := range numTopCols {
			if !l.show[c] {
				continue
			}
			shown++
			if c != colJob && c != colOwner {
				n += l.width[c]
			}
		}
		return n + topGap*(shown-1)
	}
	flexMin := func() int {
		n := min(jobsIdeal, jobMin)
		if l.show[colOwner] {
			n += min(ownerIdeal, ownerMinWidth)
		}
		return n
	}
	for _, c := range topDropOrder {
		if fixed()+flexMin() <= sc.width {
			break
		}
		l.show[c] = false
	}
	room := max(sc.width-fixed(), 1)
	job, owner := min(jobsIdeal, jobMin), 0
	if l.show[colOwner] {
		owner = min(ownerIdeal, ownerMinWidth)
	}
	grow := func(cur *int, to int) {
		if add := min(to-*cur, room-job-owner); add > 0 {
			*cur += add
		}
	}
	// the jobs' names and owners first, then the processes' longer labels
	grow(&job, min(jobsIdeal, jobPrefWidth))
	if l.show[colOwner] {
		grow(&owner, min(ownerIdeal, ownerPrefWidth))
	}
	grow(&job, jobsIdeal)
	if l.show[colOwner] {
		grow(&owner, ownerIdeal)
	}
	grow(&job, allIdeal)
	if job+owner > room { // narrower than the least table: JOB takes the rest
		job = max(room-owner, 1)
	}
	l.width[colJob], l.width[colOwner] = job, owner
	return l
}

// line draws one row's cells in the layout; plain leaves out the styles
// (the cursor's row is drawn reversed instead), pad fills the last column.
func (l *topLayout) line(prefix string, c [numTopCols]topCell, cut topJobCut, plain, pad bool) string {
	var b strings.Builder
	b.WriteString(prefix)
	last := numTopCols - 1
	for last > 0 && !l.show[last] {
		last--
	}
	first := true
	for col := range numTopCols {
		if !l.show[col] {
			continue
		}
		if !first {
			b.WriteString(strings.Repeat(" ", topGap))
		}
		first = false
		w := l.width[col]
		cell := c[col]
		if col == colJob || col == colOwner {
			s := cell.text()
			if cellWidth(s) > w && col == colJob {
				s = strings.TrimSuffix(s, cut.suffix)
				if cut.short != "" {
					s = cut.short
				}
				keep := ""
				if w >= cellWidth(cut.suffix)+cellWidth(s) || w > cellWidth(cut.suffix)+4 {
					keep = cut.suffix
				}
				s = truncateCells(s, w-cellWidth(keep)) + keep
			}
			s = truncateCells(s, w)
			cell = plainCell(s)
		}
		text := cell.render(plain)
		gap := w - cellWidth(cell.text())
		switch {
		case topColRight[col]:
			b.WriteString(strings.Repeat(" ", max(gap, 0)) + text)
		case col == last && !pad:
			b.WriteString(text)
		default:
			b.WriteString(text + strings.Repeat(" ", max(gap, 0)))
		}
	}
	return b.String()
}

// table draws the job table: its header line, and its body (group headers,
// rows, orphans' command lines), with the index of the body line that holds
// the cursor (-1: none).
func (sc *topScreen) table() (head string, body []string, cursorLine int) {
	devs := sc.devices()
	indent := 0
	if sc.markers {
		indent = 2
	}
	cells := make([][numTopCols]topCell, len(sc.rows))
	cuts := make([]topJobCut, len(sc.rows))
	procRow := make([]bool, len(sc.rows))
	for i, r := range sc.rows {
		cells[i], cuts[i] = sc.cells(r, devs)
		procRow[i] = r.proc != nil
	}
	l := sc.layoutTable(indent, cells, cuts, procRow)
	var hc [numTopCols]topCell
	for c := range numTopCols {
		hc[c] = plainCell(topColHeads[c])
	}
	head = sc.st.bold.Render(l.line(strings.Repeat(" ", indent), hc, topJobCut{}, true, false))

	// group totals, for the headers
	type total struct {
		jobs     int
		gpu, rss uint64
	}
	totals := map[string]*total{}
	for _, r := range sc.rows {
		if r.proc == nil {
			t := totals[r.job.Kind]
			if t == nil {
				t = &total{}
				totals[r.job.Kind] = t
			}
			t.jobs++
			t.gpu += r.job.GPUBytes
			t.rss += r.job.RSSBytes
		}
	}
	cursorLine = -1
	lastKind := ""
	for i, r := range sc.rows {
		if sc.group && r.proc == nil && r.job.Kind != lastKind {
			lastKind = r.job.Kind
			t := totals[r.job.Kind]
			body = append(body, sc.fitLine(sc.st.bold.Render(kindTitles[r.job.Kind])+
				sc.st.dim.Render(fmt.Sprintf("  %s, %s GPU memory, %s RSS", topPlural(t.jobs, "job"),
					units.FormatBytesFixed(t.gpu), units.FormatBytesFixed(t.rss)))))
		}
		prefix := strings.Repeat(" ", indent)
		if sc.markers && r.proc == nil {
			prefix = "▸ "
			if sc.expanded[r.job.Key] {
				prefix = "▾ "
			}
		}
		if i == sc.cursor {
			cursorLine = len(body)
			body = append(body, sc.fitLine(sc.st.cursor.Render(l.line(prefix, cells[i], cuts[i], true, true))))
		} else {
			body = append(body, sc.fitLine(l.line(prefix, cells[i], cuts[i], false, false)))
		}
		if r.proc == nil && r.job.Orphan && len(r.job.Processes) > 0 {
			body = append(body, sc.commandLines(indent, r.job.Processes[0])...)
		}
	}
	return head, body, cursorLine
}

// commandLines shows an orphan's whole command line under its row, wrapped
// to the screen: orphans are what people kill from top, and they are often
// all "python3 -c" until the rest is read.
func (sc *topScreen) commandLines(indent int, p attrib.Process) []string {
	cmd := topCommand(p.Cmdline)
	if cmd == "" {
		cmd = p.Comm
	}
	cmd = termsafe.Line(cmd)
	label := strings.Repeat(" ", indent+2) + "command: "
	w := 0
	if sc.width > 0 {
		w = max(sc.width-cellWidth(label), 10)
	}
	var out []string
	for i, s := range topWrap(cmd, w) {
		l := strings.Repeat(" ", cellWidth(label))
		if i == 0 {
			l = sc.st.dim.Render(label)
		}
		out = append(out, sc.fitLine(l+s))
	}
	return out
}

var sparkRunes = []rune("▁▂▃▄▅▆▇█")

// sparkline draws the last width points' GPU memory, scaled to their range.
func sparkline(h []timeline.Point, width int) string {
	if len(h) == 0 {
		return ""
	}
	if len(h) > width {
		// Keep the newest points, one per column, evenly spaced.
		step := float64(len(h)) / float64(width)
		pts := make([]timeline.Point, width)
		for i := range pts {
			pts[i] = h[int(float64(i)*step)]
		}
		pts[width-1] = h[len(h)-1]
		h = pts
	}
	lo, hi := h[0].GPU, h[0].GPU
	for _, p := range h {
		lo, hi = min(lo, p.GPU), max(hi, p.GPU)
	}
	var b strings.Builder
	for _, p := range h {
		i := 0
		if hi > lo {
			i = int(float64(p.GPU-lo) / float64(hi-lo) * float64(len(sparkRunes)-1))
		}
		b.WriteRune(sparkRunes[i])
	}
	return b.String()
}
