package cli

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/agent"
	"github.com/vramguard/vramguard/internal/testbin"
)

// TestNoticesOnce: the shared agent's notices for this user are printed
// once each, across commands (the newest shown is remembered in the state
// directory); without a shared agent nothing is asked or printed.
func TestNoticesOnce(t *testing.T) {
	shared, home := t.TempDir(), t.TempDir()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	notices := []agent.Notice{{ID: 1, UID: 1000, User: "ana", Time: t0, Text: "vramguard: kernel 5e7c2a91 (pid 4127) has held 20 GiB on GPU 3 unused for 1h0m0s; shut it down"}}
	ln, err := net.Listen("unix", filepath.Join(shared, "api.sock"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{"notices": notices})
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	env := map[string]string{"VRAMGUARD_SHARED_DIR": shared, "VRAMGUARD_HOME": home}
	f := &Factory{Getenv: func(k string) string { return env[k] }}
	run := func() string {
		var b bytes.Buffer
		noticesTo(t.Context(), f, &b)
		return b.String()
	}
	if got := run(); got != notices[0].Text+"\n" {
		t.Fatalf("first command printed %q", got)
	}
	if got := run(); got != "" {
		t.Fatalf("the notice was printed again: %q", got)
	}
	notices = append(notices, agent.Notice{ID: 2, UID: 1000, User: "ana", Time: t0.Add(time.Minute), Text: "vramguard: another"})
	if got := run(); got != "vramguard: another\n" {
		t.Fatalf("a newer notice: %q", got)
	}
	if _, err := os.Stat(filepath.Join(home, noticesSeen)); err != nil {
		t.Fatal(err)
	}
	env["VRAMGUARD_SHARED_DIR"] = t.TempDir() // no agent there
	if got := run(); got != "" {
		t.Fatalf("without an agent: %q", got)
	}
}

// TestRunTerminalNotices: a running `vramguard run` prints the shared
// agent's new notice for its user to its terminal while the job runs,
// once; the notice already there when it started is printed before the
// job, by the command itself.
func TestRunTerminalNotices(t *testing.T) {
	shared, home := t.TempDir(), t.TempDir()
	t0 := time.Now().Add(-time.Hour)
	var mu sync.Mutex
	notices := []agent.Notice{{ID: 1, UID: 1000, User: "ana", Time: t0, Text: "vramguard: an older notice"}}
	asked := 0
	ln, err := net.Listen("unix", filepath.Join(shared, "api.sock"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		asked++
		json.NewEncoder(w).Encode(map[string]any{"notices": notices})
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	marker := filepath.Join(t.TempDir(), "started")
	// the new notice arrives once the job runs (it has written the marker)
	go func() {
		for {
			if _, err := os.Stat(marker); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		mu.Lock()
		notices = append(notices, agent.Notice{ID: 2, UID: 1000, User: "ana", Time: time.Now(),
			Text: "vramguard: kernel 5e7c2a91 (pid 4127) has held 20 GiB on GPU 3 unused for 1h0m0s; shut it down"})
		mu.Unlock()
	}()
	env := map[string]string{"VRAMGUARD_SHARED_DIR": shared, "VRAMGUARD_HOME": home}
	var out, errb testbin.Buffer
	f := &Factory{IO: IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errb}, Now: time.Now,
		Getenv: func(k string) string { return env[k] }, NoticeEvery: 50 * time.Millisecond}
	root := NewCmdRoot(f)
	// the job runs until the new notice has been printed (or 20 s)
	script := "touch " + marker + "; i=0; while [ $i -lt 400 ]; do [ -e " + marker + ".done ] && exit 0; sleep 0.05; i=$((i+1)); done; exit 3"
	go func() {
		for !strings.Contains(errb.String(), "5e7c2a91") {
			time.Sleep(20 * time.Millisecond)
		}
		os.WriteFile(marker+".done", nil, 0o644)
	}()
	root.SetArgs([]string{"run", "--gpu-backend", "none", "--no-probe", "--", "sh", "-c", script})
	if code := exitCode(f, root.ExecuteContext(t.Context())); code != 0 {
		t.Fatalf("run: exit %d: %s", code, errb.String())
	}
	got := errb.String()
	older := strings.Index(got, "vramguard: an older notice\n")
	newer := strings.Index(got, "vramguard: kernel 5e7c2a91 (pid 4127) has held 20 GiB on GPU 3 unused for 1h0m0s; shut it down\n")
	if older < 0 || newer < 0 || newer < older {
		t.Fatalf("the run's terminal: want the older notice, then the new one:\n%s", got)
	}
	if strings.Count(got, "5e7c2a91") != 1 || strings.Count(got, "an older notice") != 1 {
		t.Errorf("a notice printed more than once:\n%s", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if asked < 2 {
		t.Errorf("the agent was asked %d times; the run's loop should have asked too", asked)
	}
}
