package cli

import (
	"context"
	"fmt"
	"github.com/vramguard/vramguard/internal/termsafe"
	"path/filepath"
	"strings"

	"github.com/muesli/termenv"
	tea "github.com/vramguard/vramguard/internal/third_party/bubbletea"

	"github.com/vramguard/vramguard/internal/attrib"
	"github.com/vramguard/vramguard/internal/procfs"
	"github.com/vramguard/vramguard/internal/sampler"
)

// runTopTUI runs the interactive screen until the user quits.
func runTopTUI(ctx context.Context, f *Factory, o *topOptions, s readingSource, note string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, 1)
	if r, ok := s.(interface {
		Run(context.Context, func(error)) error
	}); ok {
		// a sampler of its own polls the machine; an agent's is asked by Next
		go r.Run(ctx, func(err error) {
			select {
			case errs <- err:
			default:
			}
		})
	}
	// The screen is a terminal (runTop checked): say so, or the renderer
	// guesses from $CI and draws without colours in a terminal of a CI job.
	r, color := topRenderer(f.IO.Out, f.Getenv, termenv.WithTTY(true))
	if r.ColorProfile() == termenv.Ascii {
		// the screen is a terminal: it shows bold and reverse whatever
		// TERM claims
		r.SetColorProfile(termenv.ANSI)
	}
	// Ask the terminal for its background now: asked later, the answer
	// would race the screen's own reading of the keyboard.
	r.HasDarkBackground()
	m := &topModel{ctx: ctx, s: s, opts: o, note: note, sortBy: o.Sort, filter: o.Filter, group: o.Group,
		st: newTopStyles(r, color), expanded: map[string]bool{}, width: 120, height: 40, errs: errs, fs: procfs.FS{Root: o.GPU.ProcRoot}}
	p := tea.NewProgram(m, tea.WithAltScreen(), tea.WithContext(ctx), tea.WithInput(f.IO.In), tea.WithOutput(f.IO.Out))
	_, err := p.Run()
	if err != nil && ctx.Err() == nil && err != tea.ErrProgramKilled {
		return Failf("top: %v", err)
	}
	return nil
}

type sampleMsg sampler.Reading
type sampleErrMsg struct{ err error }

// nextErrMsg is a reading the source could not give (the agent did not
// answer); the screen says so and asks again.
type nextErrMsg struct {
	err error
	seq uint64
}
type killDoneMsg struct {
	what string
	res  killResult
	err  error
}

type topModel struct {
	ctx  context.Context
	s    readingSource
	opts *topOptions
	note string
	fs   procfs.FS
	errs chan error
	st   *topStyles

	smp      sampler.Reading
	have     bool
	jobs     []attrib.Job
	rows     []topRow
	cursor   int
	top      int // the first line of the job table on screen
	sortBy   string
	group    bool
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
			if m.ctx.Err() != nil {
				return nil
			}
			return nextErrMsg{err: err, seq: seq}
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
	m.jobs = arrangeJobs(ownedBy(m.smp.Attrib.Jobs, m.opts.owner), m.sortBy, m.filter, m.group)
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
		procs := sortProcs(j.Processes, m.sortBy)
		for k := range procs {
			p := &procs[k]
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
	case nextErrMsg:
		m.status = "reading failed: " + msg.err.Error()
		return m, m.waitSample(msg.seq)
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
		return m.keys(msg)
	}
	return m, nil
}

// keys handles a key message. The terminal reader gives the runes of one read
// as one message ("/train" when the keys came faster than it read, as over
// ssh, tmux or a loaded machine), so each rune is a key of its own: only a
// paste is typed text as a whole.
func (m *topModel) keys(k tea.KeyMsg) (tea.Model, tea.Cmd) {
	if k.Type != tea.KeyRunes || len(k.Runes) < 2 || k.Paste {
		return m.key(k)
	}
	var cmds []tea.Cmd
	for _, r := range k.Runes {
		_, cmd := m.key(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{r}, Alt: k.Alt})
		if cmd != nil {
			cmds = append(cmds, cmd)
		}
	}
	return m, tea.Batch(cmds...)
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
	case "g":
		m.group = !m.group
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
		return fmt.Sprintf("process %d (%s)", r.proc.PID, termsafe.Line(r.proc.Comm))
	}
	return fmt.Sprintf("job %q", r.job.Name) // %q escapes every control character
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

// View draws the screen: a title and the keys, the device bars, the job
// table (scrolled to keep the cursor in sight when it is taller than the
// terminal), what the table cannot show, and the latest status.
func (m *topModel) View() string {
	st := m.st
	sc := &topScreen{st: st, width: m.width, smp: &m.smp, rows: m.rows, group: m.group, filter: m.filter, expanded: m.expanded,
		markers: true, cursor: m.cursor, history: m.s.History}
	src := m.smp.Backend
	if m.opts.GPU.Simulate != "" {
		src = "sim " + filepath.Base(m.opts.GPU.Simulate)
	}
	filter := m.filter
	if filter == "" {
		filter = "-"
	}
	if m.editing {
		filter += "█"
	}
	group := "off"
	if m.group {
		group = "on"
	}
	var above, below []string
	above = append(above,
		sc.fitLine(fmt.Sprintf("%s  %s  %s  sort: %s  group: %s  filter: %s", st.bold.Render("vramguard top"), src,
			m.smp.Time.Format("15:04:05"), m.sortBy, group, filter)),
		sc.fitLine(st.dim.Render("↑/↓ move  enter expand  s sort  g group  / filter  x kill  q quit")))
	for _, l := range topWrap(m.note, m.width) {
		if l != "" {
			above = append(above, st.warn.Render(l))
		}
	}
	if !m.have {
		return strings.Join(append(above, "", "reading GPUs and /proc..."), "\n")
	}
	above = append(above, "")
	above = append(above, sc.deviceLines()...)
	above = append(above, "")

	var body []string
	cursorLine := -1
	if len(m.rows) == 0 {
		above = append(above, sc.emptyLine())
	} else {
		var head string
		head, body, cursorLine = sc.table()
		above = append(above, head)
	}
	if f := sc.footer(); len(f) > 0 {
		below = append(below, "")
		below = append(below, f...)
	}
	var last string
	switch {
	case m.confirm != nil:
		ts := m.targets(*m.confirm)
		last = fmt.Sprintf("Kill %s (PIDs %v)? SIGTERM, then SIGKILL after %v. [y/N]", m.what(*m.confirm), pidsOf(ts), m.opts.KillGrace)
	case m.status != "":
		last = m.status
	}
	if last != "" {
		below = append(below, "")
		for _, l := range topWrap(last, m.width) {
			if m.confirm != nil {
				l = st.warn.Render(l)
			}
			below = append(below, l)
		}
	}
	body = m.scroll(body, cursorLine, m.height-len(above)-len(below))
	lines := append(append(above, body...), below...)
	return strings.Join(lines, "\n")
}

// scroll keeps the part of the table's body that fits in room lines, with
// the cursor's line in it, and says what is above and below.
func (m *topModel) scroll(body []string, cursorLine, room int) []string {
	if m.height <= 0 || len(body) <= room {
		m.top = 0
		return body
	}
	room = max(room-1, 1) // the line that says what is out of sight
	if cursorLine >= 0 {
		if cursorLine < m.top {
			m.top = cursorLine
		}
		if cursorLine >= m.top+room {
			m.top = cursorLine - room + 1
		}
	}
	m.top = max(0, min(m.top, len(body)-room))
	out := append([]string(nil), body[m.top:m.top+room]...)
	var more []string
	if m.top > 0 {
		more = append(more, fmt.Sprintf("↑ %d more", m.top))
	}
	if n := len(body) - m.top - room; n > 0 {
		more = append(more, fmt.Sprintf("↓ %d more", n))
	}
	return append(out, m.st.dim.Render("  "+strings.Join(more, "  ")+" (↑/↓ move)"))
}
