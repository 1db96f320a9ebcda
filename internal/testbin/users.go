package testbin

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Accounts runs one of shadow's tools (useradd, userdel, groupadd,
// groupdel) with args, as exec.Command's CombinedOutput. Each takes a lock
// on /etc/passwd or /etc/group and gives up at once ("cannot lock ...; try
// again later") while another holds it, as a test beside it, or another
// suite on the machine, may: then it tries again, for up to a minute.
func Accounts(tool string, args ...string) ([]byte, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		out, err := exec.Command(tool, args...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "try again later") || time.Now().After(deadline) {
			return out, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// AddUser adds a throwaway login-less user named name (useradd's other
// arguments, such as "-G", group, go before the name) and returns its UID.
// The caller removes it (userdel); User removes it when the test ends.
// It needs root, as the suite has in CI.
func AddUser(t testing.TB, name string, args ...string) int {
	t.Helper()
	argv := append(append([]string{"--no-create-home", "--shell", "/usr/sbin/nologin"}, args...), name)
	if out, err := Accounts("useradd", argv...); err != nil {
		t.Fatalf("useradd %s: %v %s", name, err, out)
	}
	out, err := exec.Command("id", "-u", name).Output()
	if err != nil {
		t.Fatalf("id -u %s: %v", name, err)
	}
	uid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("id -u %s: %v", name, err)
	}
	return uid
}

// User is AddUser for one test: the user is removed when t ends.
func User(t testing.TB, name string, args ...string) int {
	t.Helper()
	uid := AddUser(t, name, args...)
	t.Cleanup(func() { Accounts("userdel", name) })
	return uid
}

// SharedDir is a new directory every user may enter (mode 0755, below the
// system's temporary directory: t.TempDir's parents are private to the
// user running the tests), removed when t ends. Its name starts with
// prefix; a Unix socket's path in it must stay short.
func SharedDir(t testing.TB, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// CopyBinary copies the file at bin (the binary under test) into dir as
// "vramguard", mode 0755, and returns its path: a copy every user may run
// when dir is a SharedDir.
func CopyBinary(t testing.TB, bin, dir string) string {
	t.Helper()
	return CopyExecutable(t, bin, filepath.Join(dir, "vramguard"))
}

// CopyExecutable copies the file at src to dst, mode 0755, and returns
// dst.
func CopyExecutable(t testing.TB, src, dst string) string {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return dst
}
