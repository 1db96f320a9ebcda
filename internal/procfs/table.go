package procfs

import (
	"slices"

	"golang.org/x/sys/unix"
)

// Table is the live process table kept from one scan to the next, for a
// caller that needs every process listed but the changing figures (RSS,
// command name, CPU) of only some of them each time: attribution needs the
// whole tree, but the stat of only the processes of jobs and their
// ancestors. Reading /proc/<pid>/stat is most of a scan's cost (the kernel
// gathers the whole process's figures for it), so a scan skips the stat of
// processes whose place in the tree cannot have changed, and the caller
// reads those it uses with Restat.
//
// A process is known by its PID and its /proc entry's inode number, which
// the directory listing gives for free: /proc makes a new inode for each
// process, so a PID reused by a new process shows a new inode (and one
// evicted from the cache under memory pressure does too; it is then just
// read again). A process's parent changes only when that parent exits, so a
// process seen before whose parent has PPID 0 (the PID namespace's init,
// whose exit ends the namespace, or kthreadd, which never exits) keeps its
// place in the tree, and so do init and kthreadd themselves: those are
// kernel threads and daemons, most of a big machine's process table. So
// does a process seen before whose parent, seen before too, the scan read
// and found living (not a zombie): a parent that has not exited has kept
// its children. Every other process's stat is read in each scan, so the
// PPID of every process, and the tree, is as fresh as a full scan's.
//
// The stat files of known processes stay open (see statFiles), so Restat is
// one pread(2). A Table is not safe for concurrent use; Close releases its
// files.
type Table struct {
	root string
	gen  uint32
	ents map[int]*tabEnt
	r    reader
	list []pidIno // scratch: the listing in PID order
}

type pidIno struct {
	pid int
	ino uint64
}

type tabEnt struct {
	pid  int
	ino  uint64
	fd   int    // the kept stat file, or -1
	gen  uint32 // the last scan that listed it
	born uint32 // the scan that first read this process
	read uint32 // the scan that last read its stat
	p    Proc
}

// NewTable returns a table of the processes under fs.
func NewTable(fs FS) *Table {
	return &Table{root: fs.Root, ents: map[int]*tabEnt{}, r: reader{path: make([]byte, 0, 128), buf: make([]byte, 4096)}}
}

// Scan lists every process, in ascending order of PID, appending to dst:
// the stat of every process is read now except for known children of init
// or kthreadd (and those two) and known children of a known parent read
// living in this scan, whose stat is the last one read (Fresh tells which).
func (t *Table) Scan(dst []Proc) ([]Proc, error) {
	t.gen++
	if err := t.r.pidsInto(t.root); err != nil {
		return dst, err
	}
	list := t.list[:0]
	for i := range t.r.pids {
		list = append(list, pidIno{t.r.pids[i], t.r.inos[i]})
	}
	t.list = list
	slices.SortFunc(list, func(a, b pidIno) int { return a.pid - b.pid })
	for _, l := range list {
		e := t.ents[l.pid]
		if e != nil && e.ino == l.ino {
			e.gen = t.gen
			continue
		}
		if e != nil {
			e.close()
		} else {
			e = &tabEnt{pid: l.pid, fd: -1}
			t.ents[l.pid] = e
		}
		e.ino, e.gen, e.born = l.ino, t.gen, t.gen
		if err := t.open(e); err != nil {
			delete(t.ents, l.pid) // gone already
		}
	}
	for pid, e := range t.ents {
		if e.gen != t.gen {
			e.close()
			delete(t.ents, pid)
		}
	}
	// Known processes whose parent may have exited are read (the parent
	// may be a zombie, still listed, with its children reparented). In PID
	// order, a parent is usually read before its children: one known from
	// before whose stat, read in this scan, shows it living has not exited,
	// so its children keep their place.
	for _, l := range list {
		e := t.ents[l.pid]
		if e == nil || e.read == t.gen || e.p.PPID <= 0 {
			continue
		}
		if pe := t.ents[e.p.PPID]; pe != nil && pe.born != t.gen {
			if pe.p.PPID == 0 {
				continue // a child of init or kthreadd
			}
			if pe.read == t.gen && living(pe.p.State) {
				continue // its parent lives
			}
		}
		if t.restat(e) != nil {
			delete(t.ents, l.pid) // exited since the listing
			e.close()
		}
	}
	dst = slices.Grow(dst, len(list))
	for _, l := range list {
		if e := t.ents[l.pid]; e != nil {
			dst = append(dst, e.p)
		}
	}
	return dst, nil
}

// living reports whether a process in state (stat's third field) has not
// exited: not a zombie (Z) nor dead (X).
func living(state string) bool {
	switch state {
	case "Z", "X", "x":
		return false
	}
	return true
}

// Fresh reports whether pid's stat was read in the last scan or since.
func (t *Table) Fresh(pid int) bool {
	e := t.ents[pid]
	return e != nil && e.read == t.gen
}

// Restat reads pid's stat now. It fails when the process has exited (the
// table keeps what it read last).
func (t *Table) Restat(pid int) (Proc, error) {
	e := t.ents[pid]
	if e == nil {
		return FS{Root: t.root}.Proc(pid)
	}
	if err := t.restat(e); err != nil {
		return Proc{}, err
	}
	return e.p, nil
}

// open opens and reads a process new to the table, keeping its stat file
// open when the limit allows.
func (t *Table) open(e *tabEnt) error {
	t.r.setPath(t.root, e.pid, "stat")
	fd, err := t.r.open(0)
	if err != nil {
		return err
	}
	if len(t.ents) <= maxStatFiles() {
		e.fd = fd
		return t.restat(e)
	}
	b, err := t.r.preadAll(fd)
	unix.Close(fd)
	if err != nil {
		return err
	}
	return t.parse(e, b)
}

func (t *Table) restat(e *tabEnt) error {
	var b []byte
	var err error
	if e.fd >= 0 {
		b, err = t.r.preadAll(e.fd)
	} else {
		t.r.setPath(t.root, e.pid, "stat")
		b, err = t.r.read()
	}
	if err != nil {
		return err
	}
	return t.parse(e, b)
}

func (t *Table) parse(e *tabEnt, b []byte) error {
	p, err := ParseStat(b)
	if err != nil {
		return err
	}
	e.p, e.read = p, t.gen
	return nil
}

func (e *tabEnt) close() {
	if e.fd >= 0 {
		unix.Close(e.fd)
		e.fd = -1
	}
}

// Close closes the table's files; the table may be scanned again.
func (t *Table) Close() {
	for pid, e := range t.ents {
		e.close()
		delete(t.ents, pid)
	}
}
