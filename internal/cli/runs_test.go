package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/groups"
	"github.com/vramguard/vramguard/internal/procfs"
	"github.com/vramguard/vramguard/internal/ranks"
	"github.com/vramguard/vramguard/internal/store"
	"github.com/vramguard/vramguard/internal/testbin"
)

// TestLogsDefaultsToLast: `logs` without RUN is `logs last`, as `explain`
// is; `stop` still wants its RUN named.
func TestLogsDefaultsToLast(t *testing.T) {
	home, logs := logsFixture(t)
	out, errOut, code := runIn(t, home, "logs")
	if code != 0 {
		t.Fatalf("logs: exit %d: %s", code, errOut)
	}
	want, _, _ := runIn(t, home, "logs", "last")
	if out != want || !strings.Contains(out, "last stdout line without newline") {
		t.Errorf("logs without RUN printed %d bytes, logs last %d", len(out), len(want))
	}
	if got, _, _ := runIn(t, home, "logs", "--attempt", "1", "--stream", "stdout"); got != logs[0].out.String() {
		t.Errorf("logs --attempt 1 --stream stdout without RUN: %q, want %q", got, logs[0].out.String())
	}
	_, errOut, code = runIn(t, home, "stop")
	if code != ExitUsage || !strings.Contains(errOut, "accepts 1 arg") {
		t.Errorf("stop without RUN: exit %d: %s", code, errOut)
	}
}

// storeHome is a new state directory whose store fill records a fixture
// in; the store is closed before it returns, as a finished run's is.
func storeHome(t *testing.T, fill func(ctx context.Context, st *store.Store, home string)) string {
	t.Helper()
	home := t.TempDir()
	st := testbin.OpenStore(t, home)
	defer st.Close()
	fill(context.Background(), st, home)
	return home
}

// runsNow is the clock of the runs fixture.
var runsNow = time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC)

// runsHome records five runs as vramguard would have: a run restarted after
// a CUDA OOM that then succeeded, a notebook's kernel killed by the OOM
// killer and restarted twice (once on purpose), a crash, a lost run and a
// run that survived three kinds of death.
func runsHome(t *testing.T) string {
	t.Helper()
	return storeHome(t, func(ctx context.Context, st *store.Store, home string) {
		me, err := procfs.FS{}.Proc(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		type attempt struct {
			reason string
			exit   int
		}
		for _, r := range []struct {
			id, name, status string
			cmd              []string
			started, took    time.Duration // before runsNow; how long it ran (0: still running)
			attempts         []attempt
			rss, gpu         uint64
		}{
			{"20261129-155501-ab12cd", "bert-large-finetune", store.StatusFinished,
				[]string{"python", "train.py", "--config", "configs/bert_large.yaml", "--epochs", "10"},
				2*time.Hour + 5*time.Minute, time.Hour + 2*time.Minute + 9*time.Second,
				[]attempt{{"cuda_oom", 1}, {"success", 0}}, 12_400 << 20, 39_117 << 20},
			{"20261129-172010-0f9e8d", "analysis.ipynb", store.StatusRunning,
				[]string{"/usr/bin/python3", "-m", "ipykernel_launcher", "-f", "/run/user/1000/jupyter/runtime/kernel-3f2a9c1e.json"},
				40 * time.Minute, 0, []attempt{{"host_oom_killed", 137}, {"restarted", 0}, {"", 0}}, 2_100 << 20, 0},
			{"20261126-090000-77aa01", "", store.StatusFinished,
				[]string{"python", "-c", "import torch; torch.zeros(1).cuda()"},
				3*24*time.Hour + 9*time.Hour, 3 * time.Second, []attempt{{"exit_error", 1}}, 310 << 20, 0},
			{"20261120-120000-5c5c5c", "sweep-lr-3e-4", store.StatusLost,
				[]string{"torchrun", "--nproc-per-node", "8", "sweep.py", "--lr", "3e-4"},
				9*24*time.Hour + 6*time.Hour, 26 * time.Hour, []attempt{{"lost", 0}}, 88_000 << 20, 650_000 << 20},
			{"20261129-174500-e1e2e3", "flaky", store.StatusFinished,
				[]string{"python", "train.py"}, 15 * time.Minute, 14*time.Minute + 30*time.Second,
				[]attempt{{"nccl_error", 1}, {"cuda_oom", 1}, {"stalled", 137}, {"success", 0}}, 1 << 30, 3 << 30},
		} {
			start := runsNow.Add(-r.started)
			// The running run's supervisor is this test, alive.
			run := &store.Run{ID: r.id, Name: r.name, Command: r.cmd, Status: store.StatusRunning, StartedAt: start,
				SupervisorPID: os.Getpid(), SupervisorStart: me.StartTicks}
			if err := st.CreateRun(ctx, run); err != nil {
				t.Fatal(err)
			}
			for i, a := range r.attempts {
				if err := st.StartAttempt(ctx, &store.Attempt{RunID: r.id, N: i + 1, StartedAt: start}); err != nil {
					t.Fatal(err)
				}
				if a.reason != "" {
					if err := st.FinishAttempt(ctx, r.id, i+1, start.Add(r.took), a.exit, a.reason, nil); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := st.UpdatePeaks(ctx, r.id, r.rss, r.gpu); err != nil {
				t.Fatal(err)
			}
			if r.status != store.StatusRunning {
				last := r.attempts[len(r.attempts)-1]
				if err := st.FinishRun(ctx, r.id, r.status, last.reason, last.exit, start.Add(r.took), nil); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
}

// runRuns runs `vramguard runs args...` on a terminal of the given width
// ($COLUMNS; 0 for a pipe) at runsNow.
func runRuns(t *testing.T, home string, width int, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	f := &Factory{IO: IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut, IsTTY: width > 0},
		Now: func() time.Time { return runsNow }, Getenv: func(k string) string {
			switch k {
			case "VRAMGUARD_HOME":
				return home
			case "COLUMNS":
				if width > 0 {
					return strconv.Itoa(width)
				}
			}
			return ""
		}}
	root := NewCmdRoot(f)
	root.SetArgs(append([]string{"runs"}, args...))
	code := exitCode(f, root.ExecuteContext(context.Background()))
	return out.String(), errOut.String(), code
}

// update makes golden (and the tmux screens) rewrite their files instead
// of comparing with them.
var update = flag.Bool("update", false, "rewrite golden files")

// golden compares got with testdata/name; go test -update rewrites the
// file instead.
func golden(t *testing.T, name, got string) {
	t.Helper()
	testbin.Golden(t, filepath.Join("testdata", name), []byte(got), *update)
}

// TestRunsTable: at 80 columns no row wraps, the columns that give way go
// first, and a run restarted after a death says so; wide, everything shows.
func TestRunsTable(t *testing.T) {
	home := runsHome(t)
	for _, width := range []int{80, 120, 200} {
		t.Run(strconv.Itoa(width), func(t *testing.T) {
			out, errOut, code := runRuns(t, home, width)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			if len(lines) != 6 {
				t.Errorf("%d lines, want a header and 5 runs:\n%s", len(lines), out)
			}
			for _, l := range lines {
				if w := cellWidth(l); w > width {
					t.Errorf("line of %d cells on a %d-column terminal: %q", w, width, l)
				}
			}
			for _, want := range []string{"20261129-155501-ab12cd", "success after cuda_oom", "running after host_oom_killed",
				"success after 3 deaths", "lost", "exit_error"} {
				if !strings.Contains(out, want) {
					t.Errorf("no %q in\n%s", want, out)
				}
			}
			golden(t, fmt.Sprintf("runs-%d.golden", width), out)
		})
	}
	// A pipe gets every column whole.
	out, _, _ := runRuns(t, home, 0)
	if !strings.Contains(out, "ATTEMPTS") || !strings.Contains(out, "--config configs/bert_large.yaml --epochs 10") {
		t.Errorf("piped: columns or commands cut:\n%s", out)
	}
	// --json has the deaths, for scripts.
	out, _, _ = runRuns(t, home, 0, "--json")
	var runs []struct {
		ID            string   `json:"id"`
		EarlierDeaths []string `json:"earlier_deaths"`
	}
	if err := json.Unmarshal([]byte(out), &runs); err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, r := range runs {
		got[r.ID] = r.EarlierDeaths
	}
	want := map[string][]string{"20261129-155501-ab12cd": {"cuda_oom"}, "20261129-172010-0f9e8d": {"host_oom_killed"},
		"20261126-090000-77aa01": {}, "20261120-120000-5c5c5c": {}, "20261129-174500-e1e2e3": {"nccl_error", "cuda_oom", "stalled"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("earlier_deaths %v, want %v", got, want)
	}
}

// TestRunNameTaken: a second --name demo becomes demo-2, and says so, while
// demo still finds the first run; "last" is no name.
func TestRunNameTaken(t *testing.T) {
	home := t.TempDir()
	var ids []string
	for i, want := range []string{"", "this run is demo-2", "this run is demo-3"} {
		out, errOut, code := runIn(t, home, "run", "--name", "demo", "--gpu-backend", "none", "--json", "--", "true")
		if code != 0 {
			t.Fatalf("run %d: exit %d: %s", i+1, code, errOut)
		}
		var pm struct {
			RunID string `json:"run_id"`
			Name  string `json:"name"`
		}
		if err := json.Unmarshal([]byte(out), &pm); err != nil {
			t.Fatalf("run %d: %v\n%s", i+1, err, out)
		}
		if pm.RunID == "" || slices.Contains(ids, pm.RunID) {
			t.Fatalf("run %d: run id %q (earlier: %v)", i+1, pm.RunID, ids)
		}
		ids = append(ids, pm.RunID)
		if want == "" && strings.Contains(errOut, "already named") || want != "" && !strings.Contains(errOut, "is already named demo; "+want+"\n") {
			t.Errorf("run %d: stderr %q, want %q", i+1, errOut, want)
		}
	}
	for ref, id := range map[string]string{"demo": ids[0], "demo-2": ids[1], "demo-3": ids[2]} {
		out, errOut, code := runIn(t, home, "explain", ref, "--json")
		var pm struct {
			RunID string `json:"run_id"`
		}
		if code != 0 || json.Unmarshal([]byte(out), &pm) != nil || pm.RunID != id {
			t.Errorf("explain %s: exit %d, run %q, want %s: %s", ref, code, pm.RunID, id, errOut)
		}
	}
	if _, errOut, code := runIn(t, home, "run", "--name", "last", "--", "true"); code != ExitUsage || !strings.Contains(errOut, "--name last") {
		t.Errorf("run --name last: exit %d: %s", code, errOut)
	}
}

// TestRunsNarrow: on a terminal too narrow even for ID and STATUS, those two
// still show, whole, and nothing else does.
func TestRunsNarrow(t *testing.T) {
	out, _, code := runRuns(t, runsHome(t), 30)
	if code != 0 {
		t.Fatal(out)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 6 || strings.Fields(lines[0])[0] != "ID" || len(strings.Fields(lines[0])) != 2 ||
		!strings.Contains(out, "20261129-155501-ab12cd  success after cuda_oom\n") {
		t.Errorf("at 30 columns:\n%s", out)
	}
}

// groupHome is a state directory on node n1 holding runs of job 4242's
// ranks 0 and 1 (each its own supervised task) and a run of no group, and
// the group records of all four ranks (ranks 2 and 3 were on n2): rank 3
// SIGKILLed, the others collateral.
func groupHome(t *testing.T) string {
	t.Helper()
	return storeHome(t, func(ctx context.Context, st *store.Store, home string) {
		start := runsNow.Add(-10 * time.Minute)
		for _, r := range []struct {
			id, name, group, reason string
			exit                    int
		}{
			{"20261129-175000-aaaaaa", "ranks", "4242", "peer_failed", 1},
			{"20261129-175000-bbbbbb", "ranks", "4242", "peer_failed", 1},
			{"20261129-174000-cccccc", "eval", "", "success", 0},
		} {
			run := &store.Run{ID: r.id, Name: r.name, Group: r.group, Command: []string{"python3", "train.py"}, Status: store.StatusRunning, StartedAt: start}
			if err := st.CreateRun(ctx, run); err != nil {
				t.Fatal(err)
			}
			if err := st.FinishRun(ctx, r.id, store.StatusFinished, r.reason, r.exit, start.Add(5*time.Minute), nil); err != nil {
				t.Fatal(err)
			}
		}
		d := groups.Dir(filepath.Join(home, "groups"))
		kill := "SIGKILL"
		for r := 0; r < 4; r++ {
			node, runID := "n1", []string{"20261129-175000-aaaaaa", "20261129-175000-bbbbbb"}[r%2]
			if r >= 2 {
				node, runID = "n2", []string{"20261129-175001-dddddd", "20261129-175001-eeeeee"}[r%2]
			}
			w, code, steps, peak := 4, 1, int64(40), uint64(250<<20)
			rk := ranks.Rank{Rank: r, WorldSize: &w, Node: node, PID: 1000 + r, ExitCode: &code, Reason: "peer_failed", Collateral: true,
				Evidence: []string{"a peer closed its connection: RuntimeError: Connection closed by peer"}, OptimizerSteps: &steps, PeakHostBytes: &peak,
				LastLine: "RuntimeError: [./gloo/transport/tcp/pair.cc:598] Connection closed by peer"}
			failure, at := ranks.FailureConsequence, start.Add(5*time.Minute+time.Duration(r)*100*time.Millisecond)
			summary := ""
			if r == 3 {
				c := 137
				rk.ExitCode, rk.Signal, rk.Reason, rk.Collateral = &c, &kill, "killed", false
				rk.Evidence, rk.LastLine = []string{"ended by SIGKILL (read from pidfd)"}, "rank 3 fails at step 3 (kill)"
				failure, at, summary = ranks.FailureExternal, start.Add(5*time.Minute-time.Second), "the job was killed with SIGKILL, and nothing shows it was the OOM killer"
			}
			m := ranks.Member{Group: "4242", RunID: runID, RunName: "ranks", StateDir: "/home/u/.local/state/vramguard-" + node, Host: node,
				Status: ranks.MemberEnded, Rank: rk, Failure: failure, FailedAt: at, Summary: summary, Written: at}
			if err := d.Write(m); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestRunsGroup: the runs of one group are one line, its reason the
// group's story's (rank 3 on n2 first, although neither run here knows of
// it but by the records), its ranks on both nodes counted; -v lists every
// rank beneath it; explain --group prints the story.
func TestRunsGroup(t *testing.T) {
	home := groupHome(t)
	out, errOut, code := runRuns(t, home, 200)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if strings.Count(out, "train.py") != 2 || !strings.Contains(out, "group 4242") || !strings.Contains(out, "killed (rank 3 on n2 first)") ||
		!strings.Contains(out, "[4 ranks on 2 nodes]") {
		t.Errorf("runs:\n%s", out)
	}
	golden(t, "runs-group.golden", out)
	out, _, _ = runRuns(t, home, 200, "-v")
	golden(t, "runs-group-v.golden", out)
	var so, se bytes.Buffer
	f := &Factory{IO: IOStreams{In: strings.NewReader(""), Out: &so, ErrOut: &se}, Now: func() time.Time { return runsNow },
		Getenv: func(k string) string {
			if k == "VRAMGUARD_HOME" {
				return home
			}
			return ""
		}}
	t.Setenv("TZ", "UTC")
	root := NewCmdRoot(f)
	root.SetArgs([]string{"explain", "--group", "4242"})
	if code := exitCode(f, root.Execute()); code != 0 {
		t.Fatalf("explain --group: exit %d: %s", code, se.String())
	}
	golden(t, "explain-group.golden", so.String())
	so.Reset()
	root = NewCmdRoot(f)
	root.SetArgs([]string{"explain", "--group", "4243"})
	if code := exitCode(f, root.Execute()); code != ExitUsage || !strings.Contains(se.String(), "no record of the group 4243") {
		t.Errorf("an unknown group: exit %d: %s", code, se.String())
	}
}
