package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/ranks"
)

// TestHomeOnNetworkFS: with the state directory on NFS (a cluster's home),
// this node's database and run files are in its own directory, the job
// groups' records in the state directory, and doctor says where each is.
// A Slurm task's run records its rank there, running and then ended.
func TestHomeOnNetworkFS(t *testing.T) {
	dir := t.TempDir()
	shared, node := filepath.Join(dir, "nfs-home", "state"), filepath.Join(dir, "node-local")
	t.Setenv("SLURM_JOB_ID", "")
	for k, v := range map[string]string{"SLURM_PROCID": "2", "SLURM_NTASKS": "4", "SLURMD_NODENAME": "n2"} {
		t.Setenv(k, v)
	}
	env := map[string]string{"VRAMGUARD_HOME": shared, "VRAMGUARD_NODE_HOME": node}
	var out, errb bytes.Buffer
	f := &Factory{IO: IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errb}, Now: time.Now,
		Getenv: func(k string) string { return env[k] },
		NetFS: func(p string) string {
			if strings.HasPrefix(p, filepath.Join(dir, "nfs-home")) {
				return "nfs"
			}
			return ""
		}}
	if f.Home() != node || f.GroupDir() != filepath.Join(shared, "groups") || f.StateDir() != shared {
		t.Fatalf("home %s, group dir %s, state dir %s", f.Home(), f.GroupDir(), f.StateDir())
	}
	exec := func(args ...string) int {
		out.Reset()
		errb.Reset()
		root := NewCmdRoot(f)
		root.SetArgs(args)
		return exitCode(f, root.Execute())
	}
	if code := exec("run", "--group", "job-7", "--gpu-backend", "none", "--no-probe", "--", "sh", "-c", "exit 3"); code == 0 {
		t.Fatalf("run: exit %d: %s", code, errb.String())
	}
	if _, err := os.Stat(filepath.Join(node, "vramguard.db")); err != nil {
		t.Errorf("this node's database: %v", err)
	}
	if _, err := os.Stat(filepath.Join(shared, "vramguard.db")); err == nil {
		t.Errorf("a database was made in the state directory on NFS")
	}
	b, err := os.ReadFile(filepath.Join(shared, "groups", "job-7", "rank-2.json"))
	if err != nil {
		t.Fatalf("the rank's record: %v", err)
	}
	var m ranks.Member
	if err := json.Unmarshal(b, &m); err != nil || m.Status != ranks.MemberEnded || m.Rank.Node != "n2" || m.StateDir != node ||
		m.Rank.ExitCode == nil || *m.Rank.ExitCode != 3 || m.Rank.Reason != "exit_error" {
		t.Errorf("record %+v (%v)\n%s", m, err, b)
	}
	if code := exec("explain", "--group", "job-7", "--json"); code != 0 || !strings.Contains(out.String(), `"reason": "exit_error"`) {
		t.Errorf("explain --group: exit %d\n%s%s", code, out.String(), errb.String())
	}
	if r, ok := stateDirCheck(f); !ok || r.Status != "ok" || !strings.Contains(r.Evidence, "is on nfs") || !strings.Contains(r.Evidence, node) ||
		!strings.Contains(r.Evidence, filepath.Join(shared, "groups")) {
		t.Errorf("doctor: %v %+v", ok, r)
	}
	// no node directory to be had: the database stays where it was, and
	// doctor warns with the fix
	base := t.TempDir()
	nodeHomeBase = base
	defer func() { nodeHomeBase = "/var/tmp" }()
	os.Mkdir(filepath.Join(base, "vramguard-"+strconv.Itoa(os.Getuid())), 0o777)
	os.Chmod(filepath.Join(base, "vramguard-"+strconv.Itoa(os.Getuid())), 0o777)
	delete(env, "VRAMGUARD_NODE_HOME")
	if r, ok := stateDirCheck(f); !ok || r.Status != "warn" || !strings.Contains(r.Evidence, "may be written by others") || !strings.Contains(r.Fix, "VRAMGUARD_NODE_HOME") {
		t.Errorf("doctor without a node directory: %v %+v", ok, r)
	}
	env["VRAMGUARD_NODE_HOME"] = node
	// a local state directory: nothing moves, doctor says nothing
	f.NetFS = func(string) string { return "" }
	if f.Home() != shared {
		t.Errorf("a local state directory: home %s", f.Home())
	}
	if _, ok := stateDirCheck(f); ok {
		t.Error("doctor reports a local state directory")
	}
}

// TestNodeHomeRefusesOthers: the default node directory is made this
// user's alone; one another user owns, one others may write, or a link is
// refused, with what to set instead.
func TestNodeHomeRefusesOthers(t *testing.T) {
	nodeHomeBase = t.TempDir()
	defer func() { nodeHomeBase = "/var/tmp" }()
	f := &Factory{Getenv: func(string) string { return "" }}
	d, err := f.NodeHome()
	if err != nil {
		t.Fatalf("NodeHome: %v", err)
	}
	if st, err := os.Lstat(d); err != nil || !st.IsDir() || st.Mode().Perm() != 0o700 {
		t.Fatalf("%s: %v %v", d, st.Mode(), err)
	}
	os.Chmod(d, 0o777)
	if _, err := f.NodeHome(); err == nil || !strings.Contains(err.Error(), "may be written by others") {
		t.Errorf("a directory all may write: %v", err)
	}
	os.Chmod(d, 0o700)
	if os.Getuid() == 0 {
		os.Chown(d, 65534, 65534)
		if _, err := f.NodeHome(); err == nil || !strings.Contains(err.Error(), "belongs to another user") {
			t.Errorf("another user's directory: %v", err)
		}
	}
	os.RemoveAll(d)
	os.Symlink(t.TempDir(), d)
	if _, err := f.NodeHome(); err == nil || !strings.Contains(err.Error(), "VRAMGUARD_NODE_HOME") {
		t.Errorf("a link: %v", err)
	}
}
