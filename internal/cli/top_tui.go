package cli

import (
	"context"
	"fmt"
	"strings"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"

	"github.com/vramguard/vramguard/internal/attrib"
	"github.com/vramguard/vramguard/internal/gpu"
	"github.com/vramguard/vramguard/internal/procfs"
	"github.com/vramguard/vramguard/internal/sampler"
	"github.com/vramguard/vramguard/internal/timeline"
	"github.com/vramguard/vramguard/internal/units"
)

// runTopTUI runs the interactive screen until the user quits.
func runTopTUI(ctx context.Context, f *Factory, o *topOptions, s *sampler.Sampler, note string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, 1)
	go s.Run(ctx, func(err error) {
		select {
		case errs <- err:
		default:
		}
	})
	m := &topModel{ctx: ctx, s: s, opts: o, note: note, sortBy: o.Sort, filter: o.Filter,
		expanded: map[string]bool{}, width: 120, height: 40, errs: errs, fs: procfs.FS{Root: o.GPU.ProcRoot}}
	p := tea.NewProgram(m, tea.WithAltScreen(), tea.WithContext(ctx), tea.WithInput(f.IO.In), tea.WithOutput(f.IO.Out))
	_, err := p.Run()
	if err != nil && ctx.Err() == nil && err != tea.ErrProgramKilled {
		return Failf("top: %v", err)
	}
	return nil
}

type sampleMsg sampler.Reading
type sampleErrMsg struct{ err error }
type killDoneMsg struct {
	what string
	res  killResult
	err  error
}

// topRow is one line of the job list: a job, or one of an expanded job's
// processes.
type topRow struct {
	job  *attrib.Job
	proc *attrib.Process
}

type topModel struct {
	ctx  context.Context
	s    *sampler.Sampler
	opts *topOptions
	note string
	fs   procfs.FS
	errs chan error

	smp      sampler.Reading
	have     bool
	jobs     []attrib.Job
	rows     []topRow
	cursor   int
	sortBy   string
	filter   string
	editing  bool
	expanded map[string]bool
	confirm  *topRow
	killing  bool
	status   string
	width    int
	height   int
}

func (m *topModel) Init() tea.Cmd { return tea.Batch(m.waitSample(0), m.waitErr()) }

func (m *topModel) waitSample(seq uint64) tea.Cmd {
	return func() tea.Msg {
		smp, err := m.s.Next(m.ctx, seq)
		if err != nil {
			return nil
		}
		return sampleMsg(smp)
	}
}

func (m *topModel) waitErr() tea.Cmd {
	return func() tea.Msg {
		select {
		case err := <-m.errs:
			return sampleErrMsg{err}
		case <-m.ctx.Done():
			return nil
		}
	}
}

// rebuild recomputes the visible rows, keeping the cursor on the same job or
// process where it can.
func (m *topModel) rebuild() {
	var keepKey string
	keepPID := 0
	if m.cursor < len(m.rows) {
		r := m.rows[m.cursor]
		keepKey = r.job.Key
		if r.proc != nil {
			keepPID = r.proc.PID
		}
	}
	m.jobs = arrangeJobs(m.smp.Attrib.Jobs, m.sortBy, m.filter)
	m.rows = m.rows[:0]
	m.cursor = 0
	for i := range m.jobs {
		j := &m.jobs[i]
		if j.Key == keepKey && keepPID == 0 {
			m.cursor = len(m.rows)
		}
		m.rows = append(m.rows, topRow{job: j})
		if !m.expanded[j.Key] {
			continue
		}
		for k := range j.Processes {
			p := &j.Processes[k]
			if j.Key == keepKey && p.PID == keepPID {
				m.cursor = len(m.rows)
			}
			m.rows = append(m.rows, topRow{job: j, proc: p})
		}
	}
}

func (m *topModel) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case sampleMsg:
		m.smp, m.have = sampler.Reading(msg), true
		m.rebuild()
		return m, m.waitSample(msg.Seq)
	case sampleErrMsg:
		m.status = "sampling failed: " + msg.err.Error()
		return m, m.waitErr()
	case killDoneMsg:
		m.killing = false
		if msg.err != nil {
			m.status = fmt.Sprintf("kill %s: %v", msg.what, msg.err)
		} else {
			m.status = fmt.Sprintf("killed %s: %s", msg.what, msg.res)
		}
		return m, nil
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
		return m, nil
	case tea.KeyMsg:
		return m.key(msg)
	}
	return m, nil
}

func (m *topModel) key(k tea.KeyMsg) (tea.Model, tea.Cmd) {
	if k.Type == tea.KeyCtrlC {
		return m, tea.Quit
	}
	if m.editing {
		switch k.Type {
		case tea.KeyEnter:
			m.editing = false
		case tea.KeyEsc:
			m.editing, m.filter = false, ""
		case tea.KeyBackspace:
			if r := []rune(m.filter); len(r) > 0 {
				m.filter = string(r[:len(r)-1])
			}
		case tea.KeyRunes, tea.KeySpace:
			m.filter += string(k.Runes)
		}
		m.rebuild()
		return m, nil
	}
	if m.confirm != nil {
		target := *m.confirm
		m.confirm = nil
		if k.String() == "y" || k.String() == "Y" {
			return m, m.kill(target)
		}
		m.status = "kill cancelled"
		return m, nil
	}
	switch k.String() {
	case "q", "esc":
		return m, tea.Quit
	case "up", "k":
		if m.cursor > 0 {
			m.cursor--
		}
	case "down", "j":
		if m.cursor < len(m.rows)-1 {
			m.cursor++
		}
	case "enter", " ", "right", "left", "e":
		if m.cursor < len(m.rows) {
			key := m.rows[m.cursor].job.Key
			m.expanded[key] = !m.expanded[key]
			if k.String() == "right" {
				m.expanded[key] = true
			} else if k.String() == "left" {
				m.expanded[key] = false
			}
			if !m.expanded[key] && m.rows[m.cursor].proc != nil {
				m.rows[m.cursor].proc = nil // keep the cursor on the job
			}
			m.rebuild()
		}
	case "s":
		for i, s := range sortKeys {
			if s == m.sortBy {
				m.sortBy = sortKeys[(i+1)%len(sortKeys)]
				break
			}
		}
		m.rebuild()
	case "/":
		m.editing = true
	case "x":
		if m.cursor < len(m.rows) && !m.killing {
			r := m.rows[m.cursor]
			if len(m.targets(r)) == 0 {
				m.status = "nothing to kill: simulated processes are never signalled"
				return m, nil
			}
			m.confirm = &r
		}
	}
	return m, nil
}

// targets lists the real processes a kill of r would signal: the process, or
// every process of the job, main process first.
func (m *topModel) targets(r topRow) []killTarget {
	procs := r.job.Processes
	if r.proc != nil {
		procs = []attrib.Process{*r.proc}
	}
	var ts []killTarget
	for _, p := range procs {
		if !p.Simulated {
			ts = append(ts, killTarget{PID: p.PID, StartTicks: p.StartTicks})
		}
	}
	return ts
}

func (m *topModel) what(r topRow) string {
	if r.proc != nil {
		return fmt.Sprintf("process %d (%s)", r.proc.PID, r.proc.Comm)
	}
	return fmt.Sprintf("job %q", r.job.Name)
}

func (m *topModel) kill(r topRow) tea.Cmd {
	ts := m.targets(r)
	what := m.what(r)
	m.killing = true
	m.status = fmt.Sprintf("sending SIGTERM to %s...", what)
	grace := m.opts.KillGrace
	return func() tea.Msg {
		res, err := killProcesses(m.ctx, m.fs, ts, grace)
		return killDoneMsg{what: what, res: res, err: err}
	}
}

var (
	styleBold   = lipgloss.NewStyle().Bold(true)
	styleDim    = lipgloss.NewStyle().Faint(true)
	styleCursor = lipgloss.NewStyle().Reverse(true)
	styleWarn   = lipgloss.NewStyle().Bold(true).Foreground(lipgloss.Color("9"))
)

func (m *topModel) View() string {
	var b strings.Builder
	src := m.smp.Backend
	if m.opts.GPU.Simulate != "" {
		src = "sim " + m.opts.GPU.Simulate
	}
	filter := m.filter
	if filter == "" {
		filter = "-"
	}
	if m.editing {
		filter += "█"
	}
	fmt.Fprintf(&b, "%s  %s  %s  sort: %s  filter: %s\n", styleBold.Render("vramguard top"), src,
		m.smp.Time.Format("15:04:05"), m.sortBy, filter)
	b.WriteString(styleDim.Render("keys: ↑/↓ move  enter expand  s sort  / filter  x kill  q quit") + "\n")
	if m.note != "" {
		b.WriteString(styleWarn.Render(m.note) + "\n")
	}
	if !m.have {
		b.WriteString("\nreading GPUs and /proc...\n")
		return b.String()
	}
	b.WriteString("\n")
	for _, d := range m.smp.Devices {
		b.WriteString(deviceBar(d, 24) + "\n")
	}
	if len(m.smp.Devices) == 0 {
		b.WriteString("no GPUs\n")
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "  %-34s %-26s %9s %19s %9s %-12s %s\n", "JOB", "OWNER", "GPU MEM", "ALLOC / RESERVED", "RSS", "HISTORY", "FLAGS")
	lastKind := ""
	for i, r := range m.rows {
		if r.proc == nil && r.job.Kind != lastKind {
			lastKind = r.job.Kind
			b.WriteString(styleBold.Render(kindTitles[r.job.Kind]) + "\n")
		}
		line := m.rowLine(r)
		if i == m.cursor {
			line = styleCursor.Render(line)
		}
		b.WriteString(line + "\n")
	}
	if len(m.rows) == 0 {
		if m.filter != "" {
			b.WriteString("no job matches the filter\n")
		} else {
			b.WriteString("no GPU processes\n")
		}
	}
	var foot strings.Builder
	_ = writeTopFooter(&foot, newSnapshot(m.smp, "", m.sortBy, ""))
	b.WriteString(foot.String())
	b.WriteString("\n")
	switch {
	case m.confirm != nil:
		ts := m.targets(*m.confirm)
		b.WriteString(styleWarn.Render(fmt.Sprintf("Kill %s (PIDs %v)? SIGTERM, then SIGKILL after %v. [y/N]",
			m.what(*m.confirm), pidsOf(ts), m.opts.KillGrace)) + "\n")
	case m.status != "":
		b.WriteString(m.status + "\n")
	}
	return b.String()
}

func (m *topModel) rowLine(r topRow) string {
	j := r.job
	if r.proc != nil {
		p := r.proc
		cmd := strings.Join(p.Cmdline, " ")
		if cmd == "" {
			cmd = p.Comm
		}
		label := fmt.Sprintf("   %d %s", p.PID, p.Comm)
		if p.ContainerPID != 0 {
			label += fmt.Sprintf(" (pid %d inside)", p.ContainerPID)
		}
		gpuMem := "-"
		if p.GPUBytes > 0 {
			gpuMem = units.FormatBytesFixed(p.GPUBytes)
		}
		return fmt.Sprintf("  %-34s %-26s %9s %19s %9s %-12s %s", topClip(label, 34), topClip(p.Role+": "+cmd, 26), gpuMem, "", units.FormatBytesFixed(p.RSSBytes), "", "")
	}
	marker := "▸"
	if m.expanded[j.Key] {
		marker = "▾"
	}
	flags := append([]string(nil), j.Flags...)
	if j.Orphan {
		flags = append(flags, "ORPHAN")
	}
	name := fmt.Sprintf("%s %s [%d]", marker, j.Name, len(j.Processes))
	return fmt.Sprintf("  %-34s %-26s %9s %19s %9s %-12s %s", topClip(name, 34), topClip(ownerLabel(*j), 26), units.FormatBytesFixed(j.GPUBytes),
		allocLabel(*j), units.FormatBytesFixed(j.RSSBytes), sparkline(m.s.History(j.Key), 12), strings.Join(flags, ","))
}

func topClip(s string, n int) string {
	r := []rune(s)
	if len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// deviceBar draws one device's memory as a bar.
func deviceBar(d gpu.Device, width int) string {
	frac := 0.0
	if d.TotalBytes > 0 {
		frac = float64(d.UsedBytes) / float64(d.TotalBytes)
	}
	n := int(frac*float64(width) + 0.5)
	bar := strings.Repeat("█", n) + strings.Repeat("░", width-n)
	util := "util -"
	if d.UtilPercent >= 0 {
		util = fmt.Sprintf("util %d%%", d.UtilPercent)
	}
	return fmt.Sprintf("%-12s %-34s [%s] %9s / %-9s %3.0f%%  %s", deviceLabel(d), topClip(d.Name, 34), bar,
		units.FormatBytesFixed(d.UsedBytes), units.FormatBytesFixed(d.TotalBytes), frac*100, util)
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
