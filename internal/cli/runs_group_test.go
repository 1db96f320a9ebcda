package cli

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/groups"
	"github.com/vramguard/vramguard/internal/ranks"
	"github.com/vramguard/vramguard/internal/store"
)

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
