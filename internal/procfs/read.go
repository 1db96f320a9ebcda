package procfs

import (
	"encoding/binary"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// How /proc is read. A sampler reads a few hundred small files every second,
// and on a VM the system calls are most of the cost: os.ReadFile spends six
// per file (openat, epoll_ctl, fstat, read, read, close) and allocates the
// path and the contents. Here a file costs openat, one read and close, into a
// buffer taken from a pool, with the path built in the same pooled scratch.
//
// /proc files are produced whole by the kernel on each read: a read that
// returns less than the buffer holds has returned the whole file (the same is
// true of regular files, where a short read means end of file), so a second
// read is made only when the first one filled the buffer.

// reader is the scratch space of one reader: a NUL-terminated path, the
// file's bytes and a directory buffer.
type reader struct {
	path []byte
	buf  []byte
	dir  []byte
	pids []int
	inos []uint64 // the directory entries' inode numbers, as pids
}

var readers = sync.Pool{New: func() any {
	return &reader{path: make([]byte, 0, 128), buf: make([]byte, 4096)}
}}

func getReader() *reader { return readers.Get().(*reader) }

func putReader(r *reader) {
	if cap(r.buf) > 256<<10 {
		r.buf = make([]byte, 4096) // a huge command line: do not keep it
	}
	readers.Put(r)
}

// setPath makes r.path root/proc/<pid>/name (root/proc/name when pid < 0;
// root/proc when name is also ""), NUL-terminated.
func (r *reader) setPath(root string, pid int, name string) {
	p := r.path[:0]
	if root == "" {
		p = append(p, "/proc"...)
	} else {
		p = append(p, root...)
		if p[len(p)-1] != '/' {
			p = append(p, '/')
		}
		p = append(p, "proc"...)
	}
	if pid >= 0 {
		p = append(p, '/')
		p = strconv.AppendInt(p, int64(pid), 10)
	}
	if name != "" {
		p = append(p, '/')
		p = append(p, name...)
	}
	r.path = append(p, 0)
}

// pathString is r.path without its NUL, for error messages.
func (r *reader) pathString() string { return string(r.path[:len(r.path)-1]) }

var atFDCWD = unix.AT_FDCWD

// open opens r.path.
func (r *reader) open(flags int) (int, error) {
	for {
		fd, _, e := unix.Syscall6(unix.SYS_OPENAT, uintptr(atFDCWD), uintptr(unsafe.Pointer(&r.path[0])),
			uintptr(flags|unix.O_RDONLY|unix.O_CLOEXEC), 0, 0, 0)
		switch e {
		case 0:
			return int(fd), nil
		case unix.EINTR:
			continue
		}
		return -1, &os.PathError{Op: "open", Path: r.pathString(), Err: e}
	}
}

// read reads the file at r.path; the result aliases r.buf and is valid until
// r's next read.
func (r *reader) read() ([]byte, error) {
	fd, err := r.open(0)
	if err != nil {
		return nil, err
	}
	n := 0
	for {
		if n == len(r.buf) {
			r.buf = append(r.buf, make([]byte, len(r.buf))...)
		}
		m, err := unix.Read(fd, r.buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			unix.Close(fd)
			return nil, &os.PathError{Op: "read", Path: r.pathString(), Err: err}
		}
		n += m
		if m == 0 || n < len(r.buf) {
			break
		}
	}
	unix.Close(fd)
	return r.buf[:n], nil
}

// preadAll reads fd from offset 0 into r.buf with pread(2), growing the
// buffer when a read fills it; the result aliases r.buf.
func (r *reader) preadAll(fd int) ([]byte, error) {
	n := 0
	for {
		if n == len(r.buf) {
			r.buf = append(r.buf, make([]byte, len(r.buf))...)
		}
		m, err := unix.Pread(fd, r.buf[n:], int64(n))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		n += m
		if m == 0 || n < len(r.buf) {
			return r.buf[:n], nil
		}
	}
}

// statFiles keeps the live /proc/<pid>/stat files open from one scan (All)
// to the next: reading an open one again is a single pread(2) at offset 0,
// where opening, reading and closing it is three system calls and a path
// walk (about a quarter of the cost, measured on a 2-core VM). A kept file
// belongs to the process it was opened for, not to the PID: once that
// process is gone (reaped) the read fails with ESRCH, the file is closed
// and the PID is opened anew, so a reused PID is never read through a stale
// file. Files of PIDs that left /proc are closed after each scan.
//
// Each kept file costs a descriptor and a page of kernel memory (the
// seq_file buffer), so at most maxStatFiles are kept; the rest are read the
// plain way. Only the live /proc (FS.Root "") is kept: fixture trees in
// tests are read the plain way. One scan at a time uses the set; a scan
// that finds it in use reads the plain way.
type statFiles struct {
	gen   uint32
	files map[int]statFile
}

type statFile struct {
	fd  int
	gen uint32 // the scan that last saw the PID
}

var liveStat atomic.Pointer[statFiles]

func init() { liveStat.Store(&statFiles{files: map[int]statFile{}}) }

// maxStatFiles bounds the kept files: 2048 (8 MiB of kernel buffers), or
// a quarter of the descriptor limit if that is lower.
var maxStatFiles = sync.OnceValue(func() int {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err == nil && rl.Cur/4 < 2048 {
		return int(rl.Cur / 4)
	}
	return 2048
})

// read reads pid's stat through its kept file, or opens (and keeps) it.
func (c *statFiles) read(r *reader, pid int) ([]byte, error) {
	if f, ok := c.files[pid]; ok {
		if b, err := r.preadAll(f.fd); err == nil {
			c.files[pid] = statFile{f.fd, c.gen}
			return b, nil
		}
		unix.Close(f.fd) // the process it was opened for has gone
		delete(c.files, pid)
	}
	r.setPath("", pid, "stat")
	fd, err := r.open(0)
	if err != nil {
		return nil, err
	}
	b, err := r.preadAll(fd)
	if err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "read", Path: r.pathString(), Err: err}
	}
	if len(c.files) < maxStatFiles() {
		c.files[pid] = statFile{fd, c.gen}
	} else {
		unix.Close(fd)
	}
	return b, nil
}

// sweep closes the files of PIDs the last scan did not list.
func (c *statFiles) sweep() {
	for pid, f := range c.files {
		if f.gen != c.gen {
			unix.Close(f.fd)
			delete(c.files, pid)
		}
	}
}

func (c *statFiles) closeAll() {
	c.gen++
	c.sweep()
}

// CloseStatFiles closes the live /proc stat files that All keeps open; the
// next All opens them again, as the first one did. For benchmarks of a
// first scan.
func CloseStatFiles() {
	if c := liveStat.Swap(nil); c != nil {
		c.closeAll()
		liveStat.CompareAndSwap(nil, c)
	}
}

// readFile reads root/proc/<pid>/name with a pooled reader and hands the
// contents to parse, which must not keep them.
func readFile[T any](fs FS, pid int, name string, parse func([]byte) T) (T, error) {
	r := getReader()
	defer putReader(r)
	r.setPath(fs.Root, pid, name)
	b, err := r.read()
	if err != nil {
		var zero T
		return zero, err
	}
	return parse(b), nil
}

// pidsInto sets r.pids to the numeric entries of root/proc, in the order
// the directory lists them, and r.inos to their inode numbers.
func (r *reader) pidsInto(root string) error {
	r.setPath(root, -1, "")
	fd, err := r.open(unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if r.dir == nil {
		r.dir = make([]byte, 32<<10)
	}
	r.pids, r.inos = r.pids[:0], r.inos[:0]
	for {
		n, err := unix.Getdents(fd, r.dir)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "getdents", Path: r.pathString(), Err: err}
		}
		if n <= 0 {
			return nil
		}
		// struct linux_dirent64: ino u64, off s64, reclen u16, type u8, name.
		for b := r.dir[:n]; len(b) >= 19; {
			reclen := int(b[16]) | int(b[17])<<8
			if reclen < 19 || reclen > len(b) {
				break
			}
			if pid, ok := direntPID(b[19:reclen]); ok {
				r.pids = append(r.pids, pid)
				r.inos = append(r.inos, binary.NativeEndian.Uint64(b[0:8]))
			}
			b = b[reclen:]
		}
	}
}

// direntPID parses a NUL-terminated directory entry name made of digits.
func direntPID(name []byte) (int, bool) {
	pid, digits := 0, 0
	for _, c := range name {
		if c == 0 {
			break
		}
		if c < '0' || c > '9' || digits >= 18 {
			return 0, false
		}
		pid = pid*10 + int(c-'0')
		digits++
	}
	return pid, digits > 0 && pid > 0
}

// comms interns command names: the same few dozen names come back in every
// scan, and each Proc would otherwise allocate its own copy.
var comms struct {
	sync.Mutex
	m map[string]string
}

func intern(b []byte) string {
	comms.Lock()
	defer comms.Unlock()
	if s, ok := comms.m[string(b)]; ok {
		return s
	}
	if comms.m == nil || len(comms.m) >= 4096 {
		comms.m = make(map[string]string, 256)
	}
	s := string(b)
	comms.m[s] = s
	return s
}

// states are the one-letter process states as strings, so parsing a state
// allocates nothing.
var states = func() (t [256]string) {
	for i := range t {
		t[i] = string(rune(i))
	}
	return t
}()

// parseInt parses an optionally signed decimal number that fits an int64.
func parseInt(b []byte) (int64, bool) {
	neg := false
	if len(b) > 0 && (b[0] == '-' || b[0] == '+') {
		neg = b[0] == '-'
		b = b[1:]
	}
	if len(b) > 19 {
		return 0, false
	}
	v, ok := parseUint(b)
	if !ok || v > 1<<63-1 {
		return 0, false
	}
	if neg {
		return -int64(v), true
	}
	return int64(v), true
}

// parseUint parses an unsigned decimal number that fits a uint64.
func parseUint(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (1<<64-1-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// nextField returns the first whitespace-separated field of b and the rest.
func nextField(b []byte) (field, rest []byte) {
	i := 0
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	j := i
	for j < len(b) && !isSpace(b[j]) {
		j++
	}
	return b[i:j], b[j:]
}
