package cli

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/joblog"
	"github.com/vramguard/vramguard/internal/procfs"
	"github.com/vramguard/vramguard/internal/store"
	"github.com/vramguard/vramguard/internal/supervise"
	"github.com/vramguard/vramguard/internal/testbin"
)

// logTime stamps every fixture record.
var logTime = time.Date(2026, 11, 29, 17, 38, 57, 123456000, time.UTC)

// jobLog writes one attempt's log through joblog's writer and keeps, per
// stream, the bytes the job wrote: what `logs --stream` must give back.
type jobLog struct {
	t        *testing.T
	lw       *joblog.Writer
	out, err bytes.Buffer
}

func newJobLog(t *testing.T, path string) *jobLog {
	t.Helper()
	lw, err := joblog.Create(path, func() time.Time { return logTime })
	if err != nil {
		t.Fatal(err)
	}
	return &jobLog{t: t, lw: lw}
}

// write records chunk as read from stream s; flush makes it reach the file.
func (j *jobLog) write(s byte, chunk string, flush bool) {
	j.t.Helper()
	if err := j.lw.Write(s, []byte(chunk), flush); err != nil {
		j.t.Fatal(err)
	}
	if s == 'o' {
		j.out.WriteString(chunk)
	} else {
		j.err.WriteString(chunk)
	}
}

func (j *jobLog) close() {
	j.t.Helper()
	if err := j.lw.Close(); err != nil {
		j.t.Fatal(err)
	}
}

// burst is attempt 2 of the fixture run: the two streams' records
// interleave, lines are split across records with the other stream's lines
// between the pieces, and there is binary, a progress bar (\r), random
// chunks, a stdout line longer than the 1 MiB the decoder holds back, and a
// last line without a newline.
func burst(j *jobLog) {
	j.write('o', "epoch 1 step 1 loss ", false)
	j.write('e', "warning: slow dataloader\n", false)
	j.write('o', "0.5", false)
	j.write('e', "progress 10%\rprogress 20%\r", false)
	j.write('o', " done\n", false)
	j.write('e', "progress 30%\n", false)
	j.write('o', "\x00\x01\xff\r\n\n", false)
	rng := rand.New(rand.NewSource(7))
	for range 600 {
		b := make([]byte, rng.Intn(120))
		for i := range b {
			if rng.Intn(12) == 0 {
				b[i] = '\n'
			} else {
				b[i] = byte(rng.Intn(256))
			}
		}
		s := byte('o')
		if rng.Intn(2) == 0 {
			s = 'e'
		}
		j.write(s, string(b), rng.Intn(9) == 0)
	}
	j.write('o', "\nbig ", false)
	piece := strings.Repeat("x", 64<<10)
	for i := range 22 { // 1.4 MiB
		j.write('o', piece, false)
		j.write('e', fmt.Sprintf("tick %d\n", i), false)
	}
	j.write('o', "\n", false)
	j.write('e', "last stderr line without newline", false)
	j.write('o', "last stdout line without newline", true)
}

// logsStore opens a store in a new state directory and records run there,
// with its run directory made and set; the store closes when the test ends.
func logsStore(t *testing.T, run *store.Run) (home string, st *store.Store, dir string) {
	t.Helper()
	home = t.TempDir()
	st = testbin.OpenStore(t, home)
	dir = supervise.RunDir(home, run.ID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	run.Dir = dir
	if err := st.CreateRun(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	return home, st, dir
}

// logsFixture records run "r1" (name "bert"), finished after two attempts,
// and returns the state directory and the two attempts' logs.
func logsFixture(t *testing.T) (string, [2]*jobLog) {
	t.Helper()
	ctx := context.Background()
	home, st, dir := logsStore(t, &store.Run{ID: "r1", Name: "bert", Command: []string{"python", "train.py"},
		Status: store.StatusRunning, StartedAt: logTime})
	var logs [2]*jobLog
	for n := 1; n <= 2; n++ {
		path := filepath.Join(dir, fmt.Sprintf("attempt-%d.log", n))
		j := newJobLog(t, path)
		if n == 1 {
			j.write('o', "a1 out\n", false)
			j.write('e', "a1 err\n", false)
			j.write('o', "a1 partial ", false)
			j.write('e', "a1 err 2\n", false)
			j.write('o', "line\n", true)
		} else {
			if err := j.lw.Note("vramguard: attempt 2 (restart 1 of 3)"); err != nil {
				t.Fatal(err)
			}
			burst(j)
		}
		j.close()
		logs[n-1] = j
		if err := st.StartAttempt(ctx, &store.Attempt{RunID: "r1", N: n, StartedAt: logTime, LogPath: path}); err != nil {
			t.Fatal(err)
		}
		if err := st.FinishAttempt(ctx, "r1", n, logTime, 1, "exit_error", nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.FinishRun(ctx, "r1", store.StatusFinished, "exit_error", 1, logTime, nil); err != nil {
		t.Fatal(err)
	}
	return home, logs
}

// timestamped prefixes every line of b, the last one too when it has no
// newline, with the time `logs -t` shows for the fixture's records.
func timestamped(b []byte) string {
	prefix := logTime.Local().Format("2006-01-02 15:04:05.000 ")
	var out strings.Builder
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n') + 1
		if i == 0 {
			i = len(b)
		}
		out.WriteString(prefix)
		out.Write(b[:i])
		b = b[i:]
	}
	return out.String()
}

// sameBytes reports where got and want first differ, without printing
// megabytes.
func sameBytes(got, want string) string {
	if got == want {
		return ""
	}
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	return fmt.Sprintf("got %d bytes, want %d; first difference at byte %d: got %q, want %q",
		len(got), len(want), i, excerpt(got, i), excerpt(want, i))
}

func excerpt(s string, i int) string {
	return s[max(i-20, 0):min(i+20, len(s))]
}

func TestLogsStream(t *testing.T) {
	home, logs := logsFixture(t)
	a1, a2 := logs[0], logs[1]
	note := "vramguard: attempt 2 (restart 1 of 3)\n"
	tests := []struct {
		name string
		args []string
		want string // stdout, byte for byte
		code int
		msg  string // in the one-line error
	}{
		{"both streams, lines whole", []string{"--attempt", "1", "r1"}, "a1 out\na1 err\na1 err 2\na1 partial line\n", 0, ""},
		{"stdout of the burst", []string{"--stream", "stdout", "r1"}, a2.out.String(), 0, ""},
		{"stderr of the burst", []string{"--stream", "stderr", "bert"}, a2.err.String(), 0, ""},
		{"stdout of attempt 1", []string{"--stream", "stdout", "--attempt", "1", "last"}, a1.out.String(), 0, ""},
		{"stderr followed across attempts", []string{"-f", "--stream", "stderr", "r1"}, a1.err.String() + a2.err.String(), 0, ""},
		{"stdout followed, one attempt", []string{"--follow", "--stream=stdout", "--attempt", "2", "r1"}, a2.out.String(), 0, ""},
		{"stdout with notes", []string{"--stream", "stdout", "--notes", "r1"}, note + a2.out.String(), 0, ""},
		{"stderr with timestamps", []string{"--stream", "stderr", "-t", "r1"}, timestamped(a2.err.Bytes()), 0, ""},
		{"stderr followed with timestamps", []string{"-f", "-t", "--stream", "stderr", "--attempt", "1", "r1"}, timestamped(a1.err.Bytes()), 0, ""},
		{"both", []string{"--stream", "both", "r1"}, "", 2, `invalid --stream "both": use stdout or stderr`},
		{"empty", []string{"--stream=", "r1"}, "", 2, `invalid --stream "": use stdout or stderr`},
		{"upper case", []string{"--stream", "STDOUT", "r1"}, "", 2, `invalid --stream "STDOUT"`},
		{"before the run is looked up", []string{"--stream", "out", "no-such-run"}, "", 2, `invalid --stream "out"`},
		{"no such attempt", []string{"--stream", "stdout", "--attempt", "3", "r1"}, "", 2, "has 2 attempts"},
		{"no such run", []string{"--stream", "stderr", "no-such-run"}, "", 2, "no-such-run"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errs, code := runCLI(t, false, append([]string{"--home", home, "logs"}, tt.args...)...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d; stderr %q", code, tt.code, errs)
			}
			if d := sameBytes(out, tt.want); d != "" {
				t.Errorf("stdout: %s", d)
			}
			if tt.code == 0 && errs != "" {
				t.Errorf("stderr %q, want none", errs)
			}
			if tt.code != 0 && (!strings.HasPrefix(errs, "vramguard: ") || !strings.Contains(errs, tt.msg) || strings.Count(errs, "\n") != 1) {
				t.Errorf("stderr %q, want one line with %q", errs, tt.msg)
			}
		})
	}
}

// TestLogsFollowStreamLive follows one stream of a live run: a stdout line
// that is unfinished when the follower catches up is shown as far as it
// goes, and its rest follows with nothing of stderr in between, then the
// next attempt's stdout.
func TestLogsFollowStreamLive(t *testing.T) {
	ctx := context.Background()
	// This test process stands in for the supervisor, so the run is not
	// marked lost.
	me, err := procfs.FS{}.Proc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	home, st, dir := logsStore(t, &store.Run{ID: "live", Command: []string{"python"}, Status: store.StatusRunning,
		StartedAt: logTime, SupervisorPID: os.Getpid(), SupervisorStart: me.StartTicks})
	path1 := filepath.Join(dir, "attempt-1.log")
	a1 := newJobLog(t, path1)
	a1.write('e', "loading\n", true)
	if err := st.StartAttempt(ctx, &store.Attempt{RunID: "live", N: 1, StartedAt: logTime, LogPath: path1}); err != nil {
		t.Fatal(err)
	}

	var out, errOut testbin.Buffer
	f := &Factory{IO: IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}, Now: time.Now, Getenv: os.Getenv}
	root := NewCmdRoot(f)
	root.SetArgs([]string{"--home", home, "logs", "-f", "--stream", "stdout", "live"})
	codec := make(chan int, 1)
	go func() { codec <- exitCode(f, root.ExecuteContext(ctx)) }()

	waitFor := func(want string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for out.String() != want {
			if time.Now().After(deadline) {
				t.Fatalf("stdout %q, want %q (stderr %q)", out.String(), want, errOut.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	a1.write('o', "step 1 loss ", true)
	waitFor("step 1 loss ") // caught up: the unfinished line is shown
	a1.write('e', "warning: lr too high\n", true)
	a1.write('o', "0.25\nstep 2 loss 0.2", true)
	waitFor("step 1 loss 0.25\nstep 2 loss 0.2")
	a1.write('e', "Traceback\n", false)
	a1.write('o', "4\n", true)
	a1.close()

	path2 := filepath.Join(dir, "attempt-2.log")
	a2 := newJobLog(t, path2)
	a2.write('o', "resumed at step 2\n", false)
	a2.write('e', "resumed\n", true)
	a2.close()
	if err := st.FinishAttempt(ctx, "live", 1, logTime, 1, "exit_error", nil); err != nil {
		t.Fatal(err)
	}
	if err := st.StartAttempt(ctx, &store.Attempt{RunID: "live", N: 2, StartedAt: logTime, LogPath: path2}); err != nil {
		t.Fatal(err)
	}
	if err := st.FinishAttempt(ctx, "live", 2, logTime, 0, "success", nil); err != nil {
		t.Fatal(err)
	}
	if err := st.FinishRun(ctx, "live", store.StatusFinished, "success", 0, logTime, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-codec:
		if code != 0 {
			t.Fatalf("exit %d; stderr %q", code, errOut.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("logs -f did not end with the run")
	}
	if d := sameBytes(out.String(), a1.out.String()+a2.out.String()); d != "" {
		t.Errorf("stdout: %s", d)
	}
}
