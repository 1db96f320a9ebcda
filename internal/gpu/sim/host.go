package sim

import (
	"strconv"
	"time"

	"github.com/vramguard/vramguard/internal/procfs"
)

// ProcReader is the part of procfs.FS the overlay stands in for.
type ProcReader interface {
	All() ([]procfs.Proc, error)
	Status(pid int) (procfs.Status, error)
	Cgroups(pid int) ([]procfs.CgroupEntry, error)
	Cmdline(pid int) ([]string, error)
}

// Host is a process table with the scenario's made-up processes laid over
// a real one: a PID the scenario describes (with "host") is answered from
// the scenario while it is alive; every other PID from the base, so a
// scenario can also point at real processes.
type Host struct {
	b    *Backend
	base ProcReader
}

// Host returns the overlay of b's scenario on base (procfs.FS{} for the
// live /proc).
func (b *Backend) Host(base ProcReader) *Host { return &Host{b: b, base: base} }

// fake returns the live host spec for pid, if the scenario makes it up.
func (h *Host) fake(pid int, t time.Duration) (*ProcessSpec, bool) {
	var found *ProcessSpec
	for i := range h.b.sc.Processes {
		p := &h.b.sc.Processes[i]
		if p.PID.N != pid || p.Host == nil {
			continue
		}
		found = p
		if alive(p, t) {
			return p, true
		}
	}
	return found, false
}

// Simulated reports whether pid is one of the scenario's made-up processes
// (dead or alive); such a PID must never be signalled.
func (h *Host) Simulated(pid int) bool {
	p, _ := h.fake(pid, h.b.Elapsed())
	return p != nil
}

func (h *Host) proc(p *ProcessSpec, t time.Duration) procfs.Proc {
	pgid := p.Host.PGID.N
	if pgid == 0 {
		pgid = p.PID.N
	}
	return procfs.Proc{
		PID: p.PID.N, PPID: p.Host.PPID.N, PGID: pgid, SID: pgid, Comm: p.Host.Comm, State: "S",
		StartTicks: uint64(time.Duration(p.Start) / (time.Second / procfs.ClockTicks)),
		RSSBytes:   p.Host.RSS.At(t - time.Duration(p.Start)),
	}
}

// All implements attrib.ProcSource.
func (h *Host) All() ([]procfs.Proc, error) {
	base, err := h.base.All()
	if err != nil {
		return nil, err
	}
	t := h.b.Elapsed()
	out := make([]procfs.Proc, 0, len(base)+len(h.b.sc.Processes))
	for _, p := range base {
		if f, _ := h.fake(p.PID, t); f == nil {
			out = append(out, p)
		}
	}
	seen := map[int]bool{}
	for i := range h.b.sc.Processes {
		p := &h.b.sc.Processes[i]
		if p.Host == nil || seen[p.PID.N] || !alive(p, t) {
			continue
		}
		seen[p.PID.N] = true
		out = append(out, h.proc(p, t))
	}
	return out, nil
}

// Status implements attrib.ProcSource.
func (h *Host) Status(pid int) (procfs.Status, error) {
	t := h.b.Elapsed()
	p, ok := h.fake(pid, t)
	if p == nil {
		return h.base.Status(pid)
	}
	if !ok {
		return procfs.Status{}, errGone(pid)
	}
	return procfs.Status{
		Name: p.Host.Comm, UID: p.Host.UID, NSpid: append([]int{pid}, p.Host.NSpid...),
		VmRSS: p.Host.RSS.At(t - time.Duration(p.Start)),
	}, nil
}

// UserName implements attrib.UserNamer: the name the scenario gives uid
// (the first process with that UID and a user), if any.
func (h *Host) UserName(uid int) (string, bool) {
	for i := range h.b.sc.Processes {
		if p := h.b.sc.Processes[i].Host; p != nil && p.UID == uid && p.User != "" {
			return p.User, true
		}
	}
	return "", false
}

// LookupUser is the UID the scenario names name, if any.
func (s *Scenario) LookupUser(name string) (int, bool) {
	for i := range s.Processes {
		if p := s.Processes[i].Host; p != nil && p.User == name && name != "" {
			return p.UID, true
		}
	}
	return 0, false
}

// Cgroups implements attrib.ProcSource.
func (h *Host) Cgroups(pid int) ([]procfs.CgroupEntry, error) {
	p, ok := h.fake(pid, h.b.Elapsed())
	if p == nil {
		return h.base.Cgroups(pid)
	}
	if !ok {
		return nil, errGone(pid)
	}
	cg := p.Host.Cgroup
	if cg == "" {
		cg = "0::/user.slice/user-1000.slice/session-1.scope"
	}
	return procfs.ParseCgroups([]byte(cg)), nil
}

// Cmdline implements attrib.ProcSource.
func (h *Host) Cmdline(pid int) ([]string, error) {
	p, ok := h.fake(pid, h.b.Elapsed())
	if p == nil {
		return h.base.Cmdline(pid)
	}
	if !ok {
		return nil, errGone(pid)
	}
	if len(p.Host.Cmdline) == 0 {
		return []string{p.Host.Comm}, nil
	}
	return append([]string(nil), p.Host.Cmdline...), nil
}

type errGone int

func (e errGone) Error() string { return "simulated process " + strconv.Itoa(int(e)) + " has exited" }
