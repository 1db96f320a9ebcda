package probe

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// errNotPrivate is a socket directory someone else could enter or write.
var errNotPrivate = errors.New("not private")

// SupervisorSocket chooses where a supervisor's probe socket named name
// (RUN.sock) lives: in a directory that only this user can enter, so no
// other user can connect to it, read the job's messages (its hello carries
// argv) or swap the socket for their own. It prefers $XDG_RUNTIME_DIR
// (/run/user/UID, private by specification) as $XDG_RUNTIME_DIR/vramguard,
// else $TMPDIR/vramguard-UID. Directories are created mode 0700; one that
// exists must be a directory (not a link) owned by this user with no access
// for group or others. When it is not (another user made it first, or it
// was made wider), a fresh private directory is made instead, note says
// why, and cleanup removes it; cleanup is never nil.
func SupervisorSocket(getenv func(string) string, name string) (path string, cleanup func(), note string, err error) {
	cleanup = func() {}
	uid := os.Geteuid()
	tmp := os.TempDir()
	var dirs []string
	if x := getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(x) && privateDir(x, uid) == nil {
		dirs = append(dirs, filepath.Join(x, "vramguard"))
	}
	dirs = append(dirs, filepath.Join(tmp, fmt.Sprintf("vramguard-%d", uid)))
	var refused []string
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if len(p) > maxSocketPath {
			continue
		}
		if err := ensurePrivateDir(d, uid); err != nil {
			refused = append(refused, err.Error())
			continue
		}
		return p, cleanup, "", nil
	}
	d, err := os.MkdirTemp(tmp, fmt.Sprintf("vramguard-%d-", uid))
	if err != nil {
		return "", cleanup, "", fmt.Errorf("probe socket directory: %w", err)
	}
	if len(refused) > 0 {
		note = fmt.Sprintf("%s; using the fresh private directory %s instead", refused[0], d)
	}
	return filepath.Join(d, name), func() { os.RemoveAll(d) }, note, nil
}

// ensurePrivateDir creates dir mode 0700, or checks that the existing one
// is private to uid.
func ensurePrivateDir(dir string, uid int) error {
	if err := os.Mkdir(dir, 0o700); err == nil {
		return nil
	} else if !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("probe socket directory %s: %w", dir, err)
	}
	return privateDir(dir, uid)
}

// privateDir checks that dir is a directory (not a symbolic link) owned by
// uid with no permission for group or others.
func privateDir(dir string, uid int) error {
	st, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("probe socket directory %s: %w", dir, err)
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	switch {
	case !st.IsDir():
		return fmt.Errorf("probe socket directory %s is not a directory (%v): %w", dir, st.Mode().Type(), errNotPrivate)
	case !ok || int(sys.Uid) != uid:
		owner := -1
		if ok {
			owner = int(sys.Uid)
		}
		return fmt.Errorf("probe socket directory %s belongs to uid %d, not %d: %w", dir, owner, uid, errNotPrivate)
	case st.Mode().Perm()&0o077 != 0:
		return fmt.Errorf("probe socket directory %s has mode %#o, open to other users: %w", dir, st.Mode().Perm(), errNotPrivate)
	}
	return nil
}

// EnsureSharedDir makes dir the directory of a machine-wide agent's shared
// sockets (probe.sock, api.sock), or checks the one that exists: the
// sockets are where every user's probes report and every user's commands
// ask, so nobody but the agent's own user (uid, root on a shared machine)
// may be able to replace them. A missing directory is created mode 0755
// (every user may connect, none may write). One that exists must be a
// directory, not a symbolic link, owned by uid (or root), with no write
// permission for group or others; each directory above it must be owned by
// uid or root and writable by no one else, or sticky (/tmp), so that no
// other user can move it aside and put their own in its place. A
// directory above it may be a symbolic link (/var/run to /run): the path
// it leads to is checked.
func EnsureSharedDir(dir string, uid int) error {
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("shared socket directory %s: not an absolute path", dir)
	}
	dir = filepath.Clean(dir)
	parent, err := filepath.EvalSymlinks(filepath.Dir(dir))
	if err != nil {
		return fmt.Errorf("shared socket directory %s: %w", dir, err)
	}
	for p := parent; ; p = filepath.Dir(p) {
		if err := trustedDir(p, uid, true); err != nil {
			return fmt.Errorf("shared socket directory %s: %w", dir, err)
		}
		if p == "/" {
			break
		}
	}
	if err := os.Mkdir(dir, 0o755); err == nil {
		// the umask may have narrowed it: every user must reach the sockets
		if err := os.Chmod(dir, 0o755); err != nil {
			return fmt.Errorf("shared socket directory %s: %w", dir, err)
		}
	} else if !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("shared socket directory %s: %w", dir, err)
	}
	if err := trustedDir(dir, uid, false); err != nil {
		return fmt.Errorf("shared socket directory %s: %w (choose another with %s, or fix it)", dir, err, EnvSharedDir)
	}
	return nil
}

// trustedDir checks that p is a directory (not a symbolic link) owned by
// uid or root that no other user can write (sticky: where others may
// write, a sticky one is allowed).
func trustedDir(p string, uid int, sticky bool) error {
	st, err := os.Lstat(p)
	if err != nil {
		return err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	switch {
	case st.Mode()&os.ModeSymlink != 0:
		return fmt.Errorf("%s is a symbolic link", p)
	case !st.IsDir():
		return fmt.Errorf("%s is not a directory", p)
	case !ok || (int(sys.Uid) != uid && sys.Uid != 0):
		owner := -1
		if ok {
			owner = int(sys.Uid)
		}
		return fmt.Errorf("%s belongs to uid %d, another user", p, owner)
	case st.Mode().Perm()&0o022 != 0 && !(sticky && st.Mode()&os.ModeSticky != 0):
		return fmt.Errorf("%s has mode %#o: other users may write in it", p, st.Mode().Perm())
	}
	return nil
}
