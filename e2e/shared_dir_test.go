package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSharedDirRefused: a user prepares the directory a root `serve
// --shared` will make its sockets in (VRAMGUARD_SHARED_DIR): one of their
// own, one every user may write, a symbolic link of theirs to a directory
// of theirs, a directory below one of theirs. serve refuses each (exit 3,
// one line naming the directory and why) and makes no socket there; a
// directory of root's is taken.
func TestSharedDirRefused(t *testing.T) {
	t.Parallel()
	m := newSharedMachine(t, "vramguard-shared-dir-")
	u := m.newUser("vgdir")
	uid := u.uid
	mkdir := func(p string, mode os.FileMode, owner int) string {
		t.Helper()
		if err := os.Mkdir(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, owner, owner); err != nil {
			t.Fatal(err)
		}
		return p
	}
	theirs := mkdir(filepath.Join(m.dir, "theirs"), 0o755, uid)
	open := mkdir(filepath.Join(m.dir, "open"), 0o777, 0)
	link := filepath.Join(m.dir, "link")
	if err := os.Symlink(theirs, link); err != nil {
		t.Fatal(err)
	}
	os.Lchown(link, uid, uid)
	below := filepath.Join(mkdir(filepath.Join(m.dir, "parent"), 0o755, uid), "run")
	for _, tt := range []struct{ what, dir, why string }{
		{"another user's directory", theirs, "belongs to uid " + strconv.Itoa(uid)},
		{"a directory every user may write", open, "other users may write"},
		{"a symbolic link", link, "symbolic link"},
		{"below another user's directory", below, "belongs to uid " + strconv.Itoa(uid)},
	} {
		// a serve that takes the directory runs until it is stopped
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, m.vg, "serve", "--shared", "--listen", "127.0.0.1:0", "--gpu-backend", "none")
		cmd.Env = append(os.Environ(), "VRAMGUARD_HOME="+filepath.Join(m.dir, "agent-home"), "VRAMGUARD_SHARED_DIR="+tt.dir)
		var errb bytes.Buffer
		cmd.Stderr = &errb
		err := cmd.Run()
		code := -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		msg := strings.TrimSpace(errb.String())
		if code != 3 || !strings.Contains(msg, tt.dir) || !strings.Contains(msg, tt.why) || strings.Count(msg, "\n") > 1 {
			t.Errorf("%s: serve exit %d (%v), stderr %q; want exit 3 naming %s and %q", tt.what, code, err, msg, tt.dir, tt.why)
		}
		for _, s := range []string{"probe.sock", "api.sock"} {
			if _, err := os.Lstat(filepath.Join(tt.dir, s)); err == nil {
				t.Errorf("%s: serve made %s there", tt.what, s)
			}
		}
	}
}
