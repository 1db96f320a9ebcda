package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/vramguard/vramguard/internal/agent"
	"github.com/vramguard/vramguard/internal/probe"
)

// noticeTimeout bounds how long a command waits for the machine-wide
// agent's notices before it goes on without them.
const noticeTimeout = 300 * time.Millisecond

// noticesSeen is the file, under the state directory, holding the time of
// the newest notice this user has been shown.
const noticesSeen = "notices-seen"

// printNotices prints, once each, the lines a machine-wide agent (serve
// --shared) has for this user (an idle job of theirs), before the command
// runs (and, every noticeEvery, in a running `vramguard run`'s terminal). It says nothing when no such agent runs or it does not answer in
// time; serve, completion and the shim never ask.
func printNotices(ctx context.Context, f *Factory, cmd *cobra.Command) {
	switch cmd.Name() {
	case "serve", "__complete", "completion", "help":
		return
	}
	noticesTo(ctx, f, f.IO.ErrOut)
}

// noticeEvery is how often a running `vramguard run` asks for notices.
const noticeEvery = 30 * time.Second

// watchNotices prints the agent's new notices for this user to w every
// noticeEvery (Factory.NoticeEvery) while a supervised run's terminal is open; stop ends it.
func watchNotices(ctx context.Context, f *Factory, w io.Writer) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		every := f.NoticeEvery
		if every <= 0 {
			every = noticeEvery
		}
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				noticesTo(ctx, f, w)
			}
		}
	}()
	return func() { cancel(); <-done }
}

// noticesTo prints the notices this user has not been shown to w, and
// remembers the newest.
func noticesTo(ctx context.Context, f *Factory, w io.Writer) {
	sock := probe.SharedAPISocket(f.Getenv)
	if st, err := os.Stat(sock); err != nil || st.Mode()&os.ModeSocket == 0 {
		return
	}
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, noticeTimeout)
	defer cancel()
	var got struct{ Notices []agent.Notice }
	if err := getAgent(ctx, agentClient(sock, noticeTimeout), "/api/v1/notices", &got); err != nil {
		return
	}
	seenFile := filepath.Join(f.Home(), noticesSeen)
	var seen time.Time
	if b, err := os.ReadFile(seenFile); err == nil && len(b) < 64 {
		seen, _ = time.Parse(time.RFC3339Nano, strings.TrimSpace(string(b)))
	}
	newest := seen
	for _, n := range got.Notices {
		if n.Time.After(seen) {
			fmt.Fprintln(w, n.Text)
			newest = n.Time
		}
	}
	if newest.After(seen) && os.MkdirAll(f.Home(), 0o700) == nil {
		_ = os.WriteFile(seenFile, []byte(newest.Format(time.RFC3339Nano)+"\n"), 0o600)
	}
}
