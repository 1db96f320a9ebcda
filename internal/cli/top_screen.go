package cli

import (
	"fmt"
	"github.com/vramguard/vramguard/internal/termsafe"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"
	"github.com/muesli/termenv"
	"golang.org/x/sys/unix"

	"github.com/vramguard/vramguard/internal/attrib"
	"github.com/vramguard/vramguard/internal/gpu"
	"github.com/vramguard/vramguard/internal/sampler"
	"github.com/vramguard/vramguard/internal/timeline"
	"github.com/vramguard/vramguard/internal/units"
)

// Load thresholds, as nvitop draws them: below light a figure is green,
// from heavy on red, yellow between.
const (
	memLight, memHeavy   = 10.0, 80.0 // percent of a device's memory
	utilLight, utilHeavy = 10.0, 75.0 // percent SM utilisation
)

// topLoadColors are the light, moderate and heavy load colours, each with a
// shade for light and one for dark terminal backgrounds.
var topLoadColors = [3]lipgloss.AdaptiveColor{
	{Light: "#00875F", Dark: "#5FD787"},
	{Light: "#AF5F00", Dark: "#FFD75F"},
	{Light: "#D70000", Dark: "#FF5F5F"},
}

// topStyles are top's text styles on one renderer. Without colour
// (NO_COLOR, CLICOLOR=0) the load styles are plain; bold, faint and
// reverse remain, so the cursor still shows.
type topStyles struct {
	bold, dim, cursor, warn lipgloss.Style
	load                    [3]lipgloss.Style
}

func newTopStyles(r *lipgloss.Renderer, color bool) *topStyles {
	st := &topStyles{
		bold:   r.NewStyle().Bold(true),
		dim:    r.NewStyle().Faint(true),
		cursor: r.NewStyle().Reverse(true),
		warn:   r.NewStyle().Bold(true),
	}
	for i := range st.load {
		st.load[i] = r.NewStyle()
		if color {
			st.load[i] = st.load[i].Foreground(topLoadColors[i])
		}
	}
	if color {
		st.warn = st.warn.Foreground(topLoadColors[2])
	}
	return st
}

// loadStyle is the style of a figure at pct percent of its whole.
func (st *topStyles) loadStyle(pct, light, heavy float64) lipgloss.Style {
	switch {
	case pct >= heavy:
		return st.load[2]
	case pct >= light:
		return st.load[1]
	}
	return st.load[0]
}

// topEnv is the environment termenv sees: the command's own, less
// NO_COLOR and CLICOLOR, which top applies to colours only (termenv would
// drop bold and reverse with them).
type topEnv struct{ getenv func(string) string }

func (e topEnv) Environ() []string { return os.Environ() }
func (e topEnv) Getenv(k string) string {
	if k == "NO_COLOR" || k == "CLICOLOR" {
		return ""
	}
	return e.getenv(k)
}

// topRenderer returns a renderer for out, with the terminal's colour
// capability, and whether load colours are wanted (NO_COLOR unset and
// CLICOLOR not 0).
func topRenderer(out io.Writer, getenv func(string) string, opts ...termenv.OutputOption) (*lipgloss.Renderer, bool) {
	r := lipgloss.NewRenderer(out, append([]termenv.OutputOption{termenv.WithEnvironment(topEnv{getenv})}, opts...)...)
	color := getenv("NO_COLOR") == "" && getenv("CLICOLOR") != "0"
	return r, color
}

// topTerminalWidth is the width of out when it is a terminal, else $COLUMNS
// when set; 0 when neither says (no limit).
func topTerminalWidth(out io.Writer, getenv func(string) string) int {
	if f, ok := out.(*os.File); ok {
		if ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ); err == nil && ws.Col > 0 {
			return int(ws.Col)
		}
	}
	if n, err := strconv.Atoi(getenv("COLUMNS")); err == nil && n > 0 {
		return n
	}
	return 0
}

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

// Columns of the job table, in the order they are drawn.
type topCol int

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

var topColHeads = [numTopCols]string{"GPU", "PID", "USER", "JOB", "OWNER", "GPU MEM", "SM", "ALLOC / RESERVED", "RSS", "HISTORY", "FLAGS"}

var topColRight = [numTopCols]bool{colPID: true, colMem: true, colSM: true, colAlloc: true, colRSS: true}

// topDropOrder is the order in which columns leave a table too wide for the
// terminal, first to go first. JOB, GPU MEM and FLAGS always stay; JOB and
// OWNER shrink (ending in …) before anything is dropped.
var topDropOrder = []topCol{colAlloc, colHist, colOwner, colSM, colUser, colRSS, colPID, colGPU}

// topDropNames says topDropOrder in words, for --help and the docs.
const topDropNames = "ALLOC / RESERVED, HISTORY, OWNER, SM, USER, RSS, PID, GPU"

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

// topPart is a run of text in one style (nil: plain).
type topPart struct {
	s  string
	st *lipgloss.Style
}

// topCell is one cell of the table: text in one or more styles.
type topCell []topPart

// A cell's text is shown, never obeyed: names, command lines and owners
// come from every user's processes (termsafe.Line).
func plainCell(s string) topCell { return topCell{{s: termsafe.Line(s)}} }

func styledCell(s string, st lipgloss.Style) topCell { return topCell{{s: termsafe.Line(s), st: &st}} }

func (c topCell) text() string {
	var b strings.Builder
	for _, p := range c {
		b.WriteString(p.s)
	}
	return b.String()
}

func (c topCell) render(plain bool) string {
	var b strings.Builder
	for _, p := range c {
		if p.st == nil || plain {
			b.WriteString(p.s)
		} else {
			b.WriteString(p.st.Render(p.s))
		}
	}
	return b.String()
}

// topWidth is how many terminal cells s takes.
func topWidth(s string) int { return lipgloss.Width(s) }

// topClip shortens s to at most w cells, ending in … when it cut.
func topClip(s string, w int) string {
	if topWidth(s) <= w {
		return s
	}
	if w <= 0 {
		return ""
	}
	return ansi.Truncate(s, w-1, "") + "…"
}

// fitLine cuts a drawn line to the screen's width (a last resort: the
// layout keeps lines within it down to very narrow terminals).
func (sc *topScreen) fitLine(s string) string {
	if sc.width > 0 && topWidth(s) > sc.width {
		return ansi.Truncate(s, sc.width-1, "") + "…"
	}
	return s
}

// topWrap breaks s at spaces into lines of at most w cells (a word longer
// than w is broken inside); w <= 0 leaves it whole.
func topWrap(s string, w int) []string {
	if w <= 0 || topWidth(s) <= w {
		return []string{s}
	}
	var lines []string
	cur := ""
	for _, word := range strings.Split(s, " ") {
		for topWidth(word) > w {
			if cur != "" {
				lines, cur = append(lines, cur), ""
			}
			head := ansi.Truncate(word, w, "")
			lines = append(lines, head)
			word = word[len(head):]
		}
		switch {
		case cur == "":
			cur = word
		case topWidth(cur)+1+topWidth(word) <= w:
			cur += " " + word
		default:
			lines, cur = append(lines, cur), word
		}
	}
	return append(lines, cur)
}

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
		labelW = max(labelW, topWidth(deviceLabel(d)))
		nameW = max(nameW, topWidth(d.Name))
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
			b.WriteString(topPadRight(topClip(d.Name, name), name) + " ")
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

func topPadRight(s string, w int) string {
	if n := w - topWidth(s); n > 0 {
		return s + strings.Repeat(" ", n)
	}
	return s
}

func topPadLeft(s string, w int) string {
	if n := w - topWidth(s); n > 0 {
		return strings.Repeat(" ", n) + s
	}
	return s
}

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
			colUser: plainCell(topClip(p.User, userWidth)),
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
		colUser: plainCell(topClip(j.User, userWidth)),
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
	jobsIdeal := topWidth(topColHeads[colJob]) // JOB's width over the jobs' rows alone
	jobMin := jobMinWidth                      // and the least it takes: a pod's namespace/name stays whole
	for _, c := range cuts {
		if c.short != "" {
			jobMin = max(jobMin, min(topWidth(c.short+c.suffix), jobPrefWidth))
		}
	}
	for c := range numTopCols {
		l.show[c] = true
		l.width[c] = topWidth(topColHeads[c])
		for i, r := range rows {
			w := topWidth(r[c].text())
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
			if topWidth(s) > w && col == colJob {
				s = strings.TrimSuffix(s, cut.suffix)
				if cut.short != "" {
					s = cut.short
				}
				keep := ""
				if w >= topWidth(cut.suffix)+topWidth(s) || w > topWidth(cut.suffix)+4 {
					keep = cut.suffix
				}
				s = topClip(s, w-topWidth(keep)) + keep
			}
			s = topClip(s, w)
			cell = plainCell(s)
		}
		text := cell.render(plain)
		gap := w - topWidth(cell.text())
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
		w = max(sc.width-topWidth(label), 10)
	}
	var out []string
	for i, s := range topWrap(cmd, w) {
		l := strings.Repeat(" ", topWidth(label))
		if i == 0 {
			l = sc.st.dim.Render(label)
		}
		out = append(out, sc.fitLine(l+s))
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
