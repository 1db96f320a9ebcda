package cli

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/agent"
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
