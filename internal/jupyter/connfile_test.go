package jupyter

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/vramguard/vramguard/internal/procfs"
	"github.com/vramguard/vramguard/internal/testbin"
)

func TestKernelID(t *testing.T) {
	k1, k2 := &Connection{Key: "k1"}, &Connection{Key: "k2"}
	a := KernelID("/tmp/tmpa.json", k1)
	for _, tt := range []struct {
		name   string
		id     string
		wantEq bool
	}{
		{"the same file and key: the same kernel (a restart)", KernelID("/tmp/tmpa.json", &Connection{Key: "k1"}), true},
		{"the same name with another key: another kernel", KernelID("/tmp/tmpa.json", k2), false},
		{"another file with the same key: another kernel", KernelID("/tmp/tmpb.json", k1), false},
		{"the path alone (a file the kernel writes itself)", KernelID("/tmp/tmpa.json", nil), false},
	} {
		if (tt.id == a) != tt.wantEq {
			t.Errorf("%s: %s against %s", tt.name, tt.id, a)
		}
	}
	if !strings.HasPrefix(a, "cf-") || len(a) != 19 {
		t.Errorf("KernelID = %q, want cf- and 16 hex digits", a)
	}
	if id := KernelID("/rt/kernel-3f2a.json", k1); id != "3f2a" {
		t.Errorf("a server's file: %q, want the server's id 3f2a", id)
	}
}

func TestReadConnection(t *testing.T) {
	d := testbin.WriteTree(t, map[string]string{
		"tmp1.json":    `{"shell_port": 5001, "iopub_port": 5002, "ip": "127.0.0.1", "key": "s3cr3t", "transport": "tcp", "signature_scheme": "hmac-sha256"}`,
		"tmp2.json":    `{"shell_port": 1, "key": "", "transport": "ipc", "ip": "/tmp/k"}`,
		"config.json":  `{"lr": 0.1}`,
		"notjson.json": `lr = 0.1`,
		"big.json":     `{"key": "` + strings.Repeat("x", maxConnectionFile) + `"}`,
	})
	for _, tt := range []struct {
		file, key, err string
	}{
		{"tmp1.json", "s3cr3t", ""},
		{"tmp2.json", "", ""},
		{"config.json", "", "not a connection file"},
		{"notjson.json", "", "not a connection file"},
		{"big.json", "", "larger than"},
		{"missing.json", "", "no such file"},
	} {
		c, err := ReadConnection(filepath.Join(d, tt.file))
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("%s: %v", tt.file, err)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%s: error %v, want %q", tt.file, err, tt.err)
		case tt.err == "" && c.Key != tt.key:
			t.Errorf("%s: key %q, want %q", tt.file, c.Key, tt.key)
		}
	}
}

// connProcs is fakeProcs with connection files to read.
type connProcs struct {
	fakeProcs
	files map[string]Connection
}

func (c connProcs) ReadConnection(file string) (Connection, error) {
	if k, ok := c.files[file]; ok {
		return k, nil
	}
	return Connection{}, os.ErrNotExist
}

// TestKernelProcsAnyConnectionFile finds kernels that clients other than
// a server started (nbclient's temporary file, a relative path), under
// vramguard's supervisor too, and takes no other program's -f FILE.json
// for a kernel.
func TestKernelProcsAnyConnectionFile(t *testing.T) {
	nb := []string{"/usr/bin/python3", "-m", "ipykernel_launcher", "-f", "/tmp/tmpq1w2.json"}
	sup := append([]string{"/usr/bin/vramguard", "run", "--kernel", "--"}, nb...)
	src := connProcs{
		fakeProcs: fakeProcs{
			procs: []procfs.Proc{
				{PID: 10, PPID: 1, Comm: "python3"}, // nbclient
				{PID: 20, PPID: 10, Comm: "vramguard", StartTicks: 100},
				{PID: 21, PPID: 20, Comm: "vramguard", StartTicks: 101},
				{PID: 22, PPID: 21, Comm: "python3", StartTicks: 102, RSSBytes: 100},
				{PID: 30, PPID: 1, Comm: "python3", StartTicks: 200, RSSBytes: 50},
				{PID: 40, PPID: 1, Comm: "python3", StartTicks: 300},
				{PID: 41, PPID: 1, Comm: "python3", StartTicks: 301},
			},
			argv: map[int][]string{
				10: {"python3", "run_notebook.py"}, 20: sup,
				21: append([]string{"/usr/bin/vramguard", "__shim", "--"}, nb...), 22: nb,
				30: {"python3", "-m", "ipykernel_launcher", "-f", "conn/editor.json"},
				40: {"python3", "train.py", "-f", "/data/config.json"},
				41: {"python3", "train.py", "-f", "/data/settings.yaml"},
			},
			cwd: map[int]string{30: "/home/a"},
			env: map[int][]string{22: {"VRAMGUARD_RUN_ID=20260101-000000-bbbbbb"}},
		},
		files: map[string]Connection{
			"/tmp/tmpq1w2.json":        {Key: "a", Transport: "tcp", ShellPort: 1},
			"/home/a/conn/editor.json": {Key: "b", Transport: "tcp", ShellPort: 2},
		},
	}
	got, err := KernelProcs(src)
	if err != nil {
		t.Fatal(err)
	}
	nbID := KernelID("/tmp/tmpq1w2.json", &Connection{Key: "a"})
	edID := KernelID("/home/a/conn/editor.json", &Connection{Key: "b"})
	type view struct {
		PID   int
		RunID string
	}
	want := map[string]view{nbID: {22, "20260101-000000-bbbbbb"}, edID: {30, ""}}
	gotV := map[string]view{}
	for id, k := range got {
		gotV[id] = view{k.PID, k.RunID}
	}
	if !reflect.DeepEqual(gotV, want) {
		t.Errorf("kernels %+v, want %+v", gotV, want)
	}
}
