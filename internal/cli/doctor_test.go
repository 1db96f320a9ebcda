package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/doctor"
)

// runCLI runs `vramguard args...` and returns stdout, stderr and the exit code.
func runCLI(t *testing.T, tty bool, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	f := &Factory{
		IO:     IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut, IsTTY: tty},
		Now:    time.Now,
		Getenv: os.Getenv,
	}
	root := NewCmdRoot(f)
	root.SetArgs(args)
	code := exitCode(f, root.ExecuteContext(context.Background()))
	return out.String(), errOut.String(), code
}

func TestDoctorFlags(t *testing.T) {
	var got *doctorOptions
	f := &Factory{IO: IOStreams{Out: &bytes.Buffer{}, ErrOut: &bytes.Buffer{}}, Getenv: os.Getenv}
	cmd := newCmdDoctor(f, func(_ context.Context, o *doctorOptions) error { got = o; return nil })
	cmd.SetArgs([]string{"--python", "/opt/py/bin/python", "--dir", "/ckpt", "--json", "--keep", "5", "--python-timeout", "3s"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	want := doctorOptions{Python: "/opt/py/bin/python", PythonGiven: true, Dir: "/ckpt", Keep: 5, JSON: true, PythonTimeout: 3 * time.Second}
	if *got != want {
		t.Errorf("options = %+v, want %+v", *got, want)
	}
	cmd = newCmdDoctor(f, func(_ context.Context, o *doctorOptions) error { got = o; return nil })
	cmd.SetArgs(nil)
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if got.Python != "python3" || got.PythonGiven || got.Keep != 3 || got.PythonTimeout != 15*time.Second || got.JSON {
		t.Errorf("defaults = %+v", *got)
	}
}

// TestDoctorBadInput: bad input exits 2 with a one-line message.
func TestDoctorBadInput(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args []string
		msg  string
	}{
		{[]string{"doctor", "--keep", "0"}, "--keep must be at least 1"},
		{[]string{"doctor", "--python", "/nonexistent/python"}, "--python /nonexistent/python"},
		{[]string{"doctor", "--python", "no-such-python-anywhere"}, "not found on PATH"},
		{[]string{"doctor", "--python", file}, "not an executable file"},
		{[]string{"doctor", "--dir", "/nonexistent/ckpt"}, "--dir /nonexistent/ckpt"},
		{[]string{"doctor", "--dir", file}, "not a directory"},
		{[]string{"doctor", "--python-timeout", "0s"}, "--python-timeout must be positive"},
		{[]string{"doctor", "extra"}, "unknown command"},
		{[]string{"doctor", "--bogus"}, "unknown flag"},
	}
	for _, tt := range tests {
		_, errOut, code := runCLI(t, false, tt.args...)
		if code != ExitUsage || !strings.Contains(errOut, tt.msg) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tt.args, code, errOut, tt.msg)
		}
		if strings.Contains(errOut, "goroutine") {
			t.Errorf("%v: stack trace on stderr", tt.args)
		}
	}
}

func containerRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	if err := doctor.ExtractTxtar(filepath.Join("..", "doctor", "testdata", "container.txtar"), root); err != nil {
		t.Fatal(err)
	}
	return root
}

// TestDoctorContainerFixture drives the command end to end against the
// container fixture: plain lines on a pipe, exit 1 because /dev/shm fails.
func TestDoctorContainerFixture(t *testing.T) {
	root := containerRoot(t)
	out, errOut, code := runCLI(t, false, "doctor", "--root", root, "--python", "/usr/local/bin/python", "--dir", "/workspace/ckpt")
	if code != ExitFailed {
		t.Fatalf("exit %d, want 1; stderr %s", code, errOut)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != len(doctor.CheckIDs()) {
		t.Fatalf("%d lines, want one per check:\n%s", len(lines), out)
	}
	var findings []string
	for _, l := range lines {
		f := strings.Split(l, "\t")
		if len(f) != 4 {
			t.Fatalf("line %q has %d fields, want status, id, evidence, fix", l, len(f))
		}
		if f[0] == "warn" || f[0] == "fail" {
			findings = append(findings, f[0]+" "+f[1])
			if f[3] == "" {
				t.Errorf("%s without a fix", f[1])
			}
		}
	}
	want := "fail container.shm,warn container.memory,warn storage.ephemeral"
	if got := strings.Join(findings, ","); got != want {
		t.Errorf("findings %s, want %s", got, want)
	}
}

func TestDoctorJSON(t *testing.T) {
	root := containerRoot(t)
	// Without the overlay directory and with a larger /dev/shm nothing
	// fails: exit 0 although warnings remain.
	fx := filepath.Join(root, doctor.FixtureFile)
	b, _ := os.ReadFile(fx)
	b = bytes.Replace(b, []byte(`"total_bytes": 67108864`), []byte(`"total_bytes": 8589934592`), 1)
	if err := os.WriteFile(fx, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runCLI(t, false, "doctor", "--root", root, "--python", "/usr/local/bin/python", "--json")
	if code != ExitOK {
		t.Fatalf("exit %d, want 0 (warnings do not fail); stderr %s", code, errOut)
	}
	var rep struct {
		Schema  string         `json:"schema"`
		Summary map[string]int `json:"summary"`
		Checks  []struct {
			ID, Group, Title, Status, Evidence, Fix string
		} `json:"checks"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if rep.Schema != doctor.SchemaVersion || len(rep.Checks) != len(doctor.CheckIDs()) {
		t.Fatalf("schema %q, %d checks", rep.Schema, len(rep.Checks))
	}
	if rep.Summary["fail"] != 0 || rep.Summary["warn"] != 1 {
		t.Errorf("summary %v, want 0 fail and 1 warn (the memory limit)", rep.Summary)
	}
	for _, c := range rep.Checks {
		if c.ID == "" || c.Group == "" || c.Title == "" || c.Evidence == "" {
			t.Errorf("incomplete check %+v", c)
		}
		switch c.Status {
		case "ok", "warn", "fail", "n/a":
		default:
			t.Errorf("%s: status %q", c.ID, c.Status)
		}
	}
}

func TestDoctorTable(t *testing.T) {
	root := containerRoot(t)
	out, _, code := runCLI(t, true, "doctor", "--root", root, "--python", "/usr/local/bin/python", "--dir", "/workspace/ckpt")
	if code != ExitFailed {
		t.Fatalf("exit %d", code)
	}
	lines := strings.Split(out, "\n")
	if !strings.Contains(lines[0], "CHECK") || !strings.Contains(lines[0], "EVIDENCE") || !strings.Contains(lines[0], "FIX") {
		t.Errorf("header %q", lines[0])
	}
	// Columns are counted in runes: the status symbols are several bytes.
	col := strings.Index(lines[0], "CHECK")
	for _, want := range []string{"✗ fail", "! warn", "✓ ok", "- n/a"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q", want)
		}
	}
	checks := 0
	for _, line := range lines[1:] {
		if line == "" {
			break // the summary follows
		}
		if strings.HasPrefix(line, " ") {
			continue // the evidence or fix of the check above, wrapped
		}
		checks++
		l := string([]rune(line)[col:])
		if !strings.HasPrefix(l, "gpu.") && !strings.HasPrefix(l, "pytorch.") && !strings.HasPrefix(l, "container.") &&
			!strings.HasPrefix(l, "storage.") && !strings.HasPrefix(l, "repro.") && !strings.HasPrefix(l, "host.") {
			t.Errorf("check id not aligned in column %d: %q", col, line)
		}
	}
	if checks != len(doctor.CheckIDs()) {
		t.Errorf("%d checks in the table, want %d", checks, len(doctor.CheckIDs()))
	}
	if !strings.Contains(out, "15 ok, 2 warn, 1 fail, 7 n/a") {
		t.Errorf("no summary line:\n%s", out)
	}
}

// TestDoctorLive runs the real command on this machine with Debian's torch.
func TestDoctorLive(t *testing.T) {
	out, errOut, code := runCLI(t, false, "doctor", "--python", "/usr/bin/python3", "--dir", t.TempDir(), "--python-timeout", "60s")
	if code != ExitOK && code != ExitFailed {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		f := strings.Split(l, "\t")
		if strings.HasPrefix(f[1], "gpu.") && f[0] == "fail" {
			t.Errorf("GPU check failed: %s", l)
		}
		if f[1] == "pytorch.import" && (f[0] != "ok" || !strings.Contains(f[2], "torch ")) {
			t.Errorf("torch not reported: %s", l)
		}
	}
}
