// Package users says who a UID is: its login name from the passwd database
// (the /etc/passwd under a configurable root, so fixture trees stand in for
// the machine's), and which groups a user belongs to (/etc/group). A UID the
// database does not name is shown as its number; a process whose owner
// cannot be read at all belongs to Unknown. It only reads.
package users

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Unknown is the owner of memory whose process /proc does not show (hidepid,
// another PID namespace, exited): its UID is NoUID.
const Unknown = "unknown"

// NoUID is the UID of an owner that cannot be read.
const NoUID = -1

// MaxFileBytes bounds how much of /etc/passwd or /etc/group is read: a
// larger file is read up to this size (the names past it show as numbers).
const MaxFileBytes = 8 << 20

// refresh is how long a parsed database is trusted before the file's
// modification time is checked again.
const refresh = 5 * time.Second

// missRecheck is how soon a UID the database does not name makes it look
// at the files again (a user added since they were read); a UID not
// missed before makes it look at once.
const missRecheck = 200 * time.Millisecond

// DB resolves UIDs and group memberships. The zero value reads the live
// /etc. It is safe for concurrent use; a changed file is read again (at
// most every few seconds).
type DB struct {
	// Root is the directory holding etc/; "" means "/".
	Root string

	mu      sync.Mutex
	checked time.Time
	files   [2]fileID         // passwd and group as last read
	missed  map[int]time.Time // UIDs not named, when each last made it look again
	names   map[int]string
	uids    map[string]int
	gids    map[int]int // a user's primary group, by UID
	groups  map[string]group
}

// fileID tells a file's versions apart: its modification time alone does
// not, as the kernel stamps it from a coarse clock, and useradd replaces
// the file (a new inode) at every change.
type fileID struct {
	mtime time.Time
	size  int64
	ino   uint64
}

type group struct {
	gid     int
	members map[string]bool
}

var system = &DB{}

// System is the machine's own database (/etc).
func System() *DB { return system }

func (db *DB) path(name string) string {
	root := db.Root
	if root == "" {
		root = "/"
	}
	return filepath.Join(root, "etc", name)
}

// Name is uid's login name; a UID the database does not name is its
// number, and NoUID is Unknown.
func (db *DB) Name(uid int) string {
	if uid == NoUID {
		return Unknown
	}
	db.load()
	db.mu.Lock()
	n, ok := db.names[uid]
	if t, seen := db.missed[uid]; !ok && (!seen || time.Since(t) > missRecheck) {
		if db.missed == nil || len(db.missed) > 4096 {
			db.missed = map[int]time.Time{}
		}
		db.missed[uid] = time.Now()
		db.checked = time.Time{} // a user added since: look again, now
	}
	db.mu.Unlock()
	if ok {
		return n
	}
	db.load()
	db.mu.Lock()
	n, ok = db.names[uid]
	db.mu.Unlock()
	if ok {
		return n
	}
	return strconv.Itoa(uid)
}

// Lookup is the UID of a user given by name or number. ok is false for a
// name the database does not know.
func (db *DB) Lookup(name string) (uid int, ok bool) {
	if n, err := strconv.Atoi(name); err == nil && n >= 0 {
		return n, true
	}
	db.load()
	db.mu.Lock()
	defer db.mu.Unlock()
	uid, ok = db.uids[name]
	return uid, ok
}

// InGroup reports whether uid belongs to the group named name: as its
// primary group, or listed as a member in /etc/group.
func (db *DB) InGroup(uid int, name string) bool {
	if name == "" {
		return false
	}
	db.load()
	db.mu.Lock()
	defer db.mu.Unlock()
	g, ok := db.groups[name]
	if !ok {
		return false
	}
	if gid, ok := db.gids[uid]; ok && gid == g.gid {
		return true
	}
	n, ok := db.names[uid]
	return ok && g.members[n]
}

// HasGroup reports whether the group database names the group.
func (db *DB) HasGroup(name string) bool {
	db.load()
	db.mu.Lock()
	defer db.mu.Unlock()
	_, ok := db.groups[name]
	return ok
}

func (db *DB) load() {
	db.mu.Lock()
	defer db.mu.Unlock()
	now := time.Now()
	if db.names != nil && !db.checked.IsZero() && now.Sub(db.checked) < refresh {
		return
	}
	db.checked = now
	var ids [2]fileID
	for i, f := range []string{"passwd", "group"} {
		if fi, err := os.Stat(db.path(f)); err == nil {
			ids[i] = fileID{mtime: fi.ModTime(), size: fi.Size()}
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				ids[i].ino = st.Ino
			}
		}
	}
	if db.names != nil && ids == db.files {
		return
	}
	db.files = ids
	clear(db.missed)
	db.names, db.uids, db.gids = map[int]string{}, map[string]int{}, map[int]int{}
	db.groups = map[string]group{}
	readLines(db.path("passwd"), func(f []string) {
		// name:password:UID:GID:GECOS:directory:shell
		if len(f) < 4 || f[0] == "" {
			return
		}
		uid, err1 := strconv.Atoi(f[2])
		gid, err2 := strconv.Atoi(f[3])
		if err1 != nil || err2 != nil || uid < 0 {
			return
		}
		if _, dup := db.names[uid]; !dup {
			db.names[uid] = f[0]
			db.gids[uid] = gid
		}
		if _, dup := db.uids[f[0]]; !dup {
			db.uids[f[0]] = uid
		}
	})
	readLines(db.path("group"), func(f []string) {
		// name:password:GID:member,member
		if len(f) < 3 || f[0] == "" {
			return
		}
		gid, err := strconv.Atoi(f[2])
		if err != nil {
			return
		}
		g := group{gid: gid, members: map[string]bool{}}
		if len(f) > 3 {
			for _, m := range strings.Split(f[3], ",") {
				if m = strings.TrimSpace(m); m != "" {
					g.members[m] = true
				}
			}
		}
		if _, dup := db.groups[f[0]]; !dup {
			db.groups[f[0]] = g
		}
	})
}

// readLines calls fn with the colon-separated fields of each line of the
// file at path (at most MaxFileBytes of it); comments and blank lines are
// skipped, and a missing file has none.
func readLines(path string, fn func([]string)) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, MaxFileBytes))
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		fn(strings.Split(string(line), ":"))
	}
}
