package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/store"
)

// errorsHome is a state directory with three runs whose ids share the
// prefix 2026, one of them named, with one attempt each.
func errorsHome(t *testing.T) string {
	t.Helper()
	return storeHome(t, func(ctx context.Context, st *store.Store, home string) {
		t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		for i, r := range []struct{ id, name string }{
			{"20260101-000000-aaaaaa", "demo"}, {"20260101-000001-bbbbbb", ""}, {"20260101-000002-cccccc", ""},
		} {
			run := &store.Run{ID: r.id, Name: r.name, Command: []string{"true"}, Status: store.StatusRunning, StartedAt: t0.Add(time.Duration(i) * time.Second)}
			if err := st.CreateRun(ctx, run); err != nil {
				t.Fatal(err)
			}
			log := filepath.Join(home, r.id+".log")
			if err := os.WriteFile(log, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := st.StartAttempt(ctx, &store.Attempt{RunID: r.id, N: 1, StartedAt: run.StartedAt, LogPath: log}); err != nil {
				t.Fatal(err)
			}
			if err := st.FinishAttempt(ctx, r.id, 1, run.StartedAt.Add(time.Second), 0, "success", nil); err != nil {
				t.Fatal(err)
			}
			if err := st.FinishRun(ctx, r.id, store.StatusFinished, "success", 0, run.StartedAt.Add(time.Second), nil); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// repeatedSegment returns a ": "-separated part of msg that occurs twice
// ("stat X: stat X: ..."), or "".
func repeatedSegment(msg string) string {
	seen := map[string]bool{}
	for _, s := range strings.Split(strings.TrimSpace(msg), ": ") {
		if len(s) > 3 && seen[s] {
			return s
		}
		seen[s] = true
	}
	return ""
}

// TestErrorMessages: each message says what is wrong once, plainly, with
// counts in words and the candidates of an ambiguous RUN.
func TestErrorMessages(t *testing.T) {
	home := errorsHome(t)
	tmp := t.TempDir()
	missing := filepath.Join(tmp, "missing.pt")
	text := filepath.Join(tmp, "notes.txt")
	if err := os.WriteFile(text, []byte(strings.Repeat("not a checkpoint at all\n", 100)), 0o600); err != nil {
		t.Fatal(err)
	}
	oneSample := filepath.Join(tmp, "one.csv")
	if err := os.WriteFile(oneSample, []byte("t,allocated,reserved,used,total\n0,1048576,2097152,3145728,8589934592\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	scenario := filepath.Join(tmp, "nope.json")
	ambiguous := `vramguard: run "2026" is ambiguous: it matches 3 runs: 20260101-000002-cccccc, 20260101-000001-bbbbbb, 20260101-000000-aaaaaa (demo); give more of the id` + "\n"
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout string // exact, when set
		stderr string // exact, when set
		has    string // a substring of stdout and stderr together
		hasNot string
	}{
		{"inspect missing file", []string{"ckpt", "inspect", missing}, ExitUsage, "", "vramguard: " + missing + ": no such file or directory\n", "", ""},
		{"verify missing file", []string{"ckpt", "verify", missing}, ExitUsage, "", "vramguard: " + missing + ": no such file or directory\n", "", ""},
		{"ls missing dir", []string{"ckpt", "ls", missing}, ExitUsage, "", "vramguard: " + missing + ": no such file or directory\n", "", ""},
		{"inspect not a checkpoint", []string{"ckpt", "inspect", text}, ExitFailed,
			text + ": not a checkpoint: no torch zip, legacy torch, safetensors or pickle structure found (2.3 KiB)\n", "", "", ""},
		{"explain ambiguous", []string{"explain", "2026"}, ExitUsage, "", ambiguous, "", ""},
		{"logs ambiguous", []string{"logs", "2026"}, ExitUsage, "", ambiguous, "", ""},
		{"unknown run", []string{"explain", "zzz"}, ExitUsage, "", "vramguard: no such run: \"zzz\" (see `vramguard runs`)\n", "", ""},
		{"missing scenario (--simulate)", []string{"top", "--once", "--simulate", scenario}, ExitUsage, "",
			"vramguard: scenario file " + scenario + ": no such file or directory\n", "", ""},
		{"missing scenario (--gpu-backend)", []string{"kernels", "--runtime-dir", tmp, "--gpu-backend", "sim:" + scenario}, ExitUsage, "",
			"vramguard: scenario file " + scenario + ": no such file or directory\n", "", ""},
		{"one attempt", []string{"logs", "--attempt", "3", "demo"}, ExitUsage, "",
			"vramguard: run 20260101-000000-aaaaaa has 1 attempt: there is no attempt 3\n", "", ""},
		{"report --url not http", []string{"report", "--agent", "none", "--url", "ftp://agent:9400"}, ExitUsage, "",
			"vramguard: --url \"ftp://agent:9400\": want http://HOST:PORT\n", "", ""},
		{"report --group --url without a host", []string{"report", "--group", "42", "--agent", "none", "--url", "http://"}, ExitUsage, "",
			"vramguard: --url \"http://\": want http://HOST:PORT\n", "", ""},
		{"one sample", []string{"analyze", oneSample}, ExitOK, "", "", ", 1 sample)", "1 samples"},
		{"one pickle", []string{"ckpt", "scan", ckptTestdata + "/malicious/benign.pt"}, ExitOK, "", "", ", 1 pickle]", "1 pickles"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code := runIn(t, home, tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d", code, tt.code)
			}
			if tt.stdout != "" && out != tt.stdout {
				t.Errorf("stdout\n%q\nwant\n%q", out, tt.stdout)
			}
			if tt.stderr != "" && errOut != tt.stderr {
				t.Errorf("stderr\n%q\nwant\n%q", errOut, tt.stderr)
			}
			both := out + errOut
			if tt.has != "" && !strings.Contains(both, tt.has) {
				t.Errorf("output lacks %q:\n%s", tt.has, both)
			}
			if tt.hasNot != "" && strings.Contains(both, tt.hasNot) {
				t.Errorf("output has %q:\n%s", tt.hasNot, both)
			}
			if s := repeatedSegment(errOut); s != "" {
				t.Errorf("stderr repeats %q: %s", s, errOut)
			}
		})
	}
}

// TestRunMissingScenarioRecordsNothing: a GPU backend that cannot be opened
// is refused before the run is recorded, so no run is left behind as lost.
func TestRunMissingScenarioRecordsNothing(t *testing.T) {
	home := t.TempDir()
	scenario := filepath.Join(t.TempDir(), "nope.json")
	_, errOut, code := runIn(t, home, "run", "--simulate", scenario, "--", "true")
	if code != ExitUsage || errOut != "vramguard: scenario file "+scenario+": no such file or directory\n" {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
	out, _, _ := runIn(t, home, "runs", "--json")
	if strings.TrimSpace(out) != "[]" {
		t.Errorf("a run was recorded: %s", out)
	}
}
