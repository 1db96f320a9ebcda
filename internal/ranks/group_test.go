package ranks

import (
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/vramguard/vramguard/internal/diagnose"
)

// task is one rank of a 4-task Slurm job judged alone, as its own
// supervisor judges it (one `vramguard run` per task), made a Member.
func task(t *testing.T, r int, node string, end int, exit *Exit, tail ...string) Member {
	t.Helper()
	p := rank(r, end, exit)
	p.Node, p.Identity.Source = node, SourceSlurm
	in := diagnose.Input{Tail: tail}
	if exit != nil {
		in.ExitCode, in.Signal = exit.Code, exit.Signal
	}
	res := judge(t, Job{Procs: []Process{p}, Tail: tail, Input: in})
	if res == nil || len(res.Ranks) != 1 {
		t.Fatalf("rank %d: Judge gave %v", r, res)
	}
	rk := res.Ranks[0]
	return Member{Group: "4242", RunID: "run-" + node + "-" + string(rune('0'+r)), Host: node, Status: MemberEnded, Rank: rk,
		Failure: rk.Failure, FailedAt: rk.FailedAt, Summary: res.Verdict.Summary, Written: at(end + 50)}
}

func TestJudgeGroup(t *testing.T) {
	segv := "Fatal Python error: Segmentation fault"
	tests := []struct {
		name      string
		members   func(t *testing.T) []Member
		reason    string
		root      int // -1: none
		rootNode  string
		order     string
		collat    []int
		notes     []string // substrings of the notes
		missing   []int
		rootCause string // substring of root_cause.how
	}{
		{
			name: "a SIGKILLed rank on n2, its peers on both nodes read its connection close",
			members: func(t *testing.T) []Member {
				return []Member{task(t, 0, "n1", 1300, code(1), peerClosed), task(t, 1, "n1", 1350, code(1), peerClosed),
					task(t, 2, "n2", 1200, code(1), peerClosed), task(t, 3, "n2", 1000, sig(syscall.SIGKILL))}
			},
			reason: diagnose.Killed, root: 3, rootNode: "n2", order: "evidence", collat: []int{0, 1, 2},
			rootCause: "rank 3 on n2 is the only rank that ended from outside",
		},
		{
			// n1's clock is 2 s behind n2's: by time rank 0 ended first, but
			// it only read a peer's close; rank 3 failed of its own
			name: "evidence before clocks",
			members: func(t *testing.T) []Member {
				return []Member{task(t, 0, "n1", -1000, code(1), peerClosed), task(t, 1, "n1", -900, code(1), peerClosed),
					task(t, 2, "n2", 1200, code(1), peerClosed), task(t, 3, "n2", 1000, sig(syscall.SIGKILL), "Killed")}
			},
			reason: diagnose.Killed, root: 3, rootNode: "n2", order: "evidence", collat: []int{0, 1, 2},
		},
		{
			name: "two ranks of different nodes failed of their own: the clocks decide, and the story says so",
			members: func(t *testing.T) []Member {
				return []Member{task(t, 0, "n1", 1300, code(1), peerClosed), task(t, 1, "n1", 1000, sig(syscall.SIGSEGV), segv),
					task(t, 2, "n2", 1200, code(1), peerClosed), task(t, 3, "n2", 900, sig(syscall.SIGSEGV), segv)}
			},
			reason: diagnose.Segfault, root: 3, rootNode: "n2", order: "clocks", collat: []int{0, 2},
			notes: []string{"clocks of different nodes"}, rootCause: "rank 1 on n1 also failed of its own",
		},
		{
			name: "two ranks of one node failed of their own: that node's clock decides",
			members: func(t *testing.T) []Member {
				return []Member{task(t, 0, "n1", 1000, sig(syscall.SIGSEGV), segv), task(t, 1, "n1", 900, sig(syscall.SIGSEGV), segv),
					task(t, 2, "n2", 1200, code(1), peerClosed), task(t, 3, "n2", 1300, code(1), peerClosed)}
			},
			reason: diagnose.Segfault, root: 1, rootNode: "n1", order: "clock", collat: []int{2, 3},
		},
		{
			name: "every rank recorded only read a failure elsewhere, and rank 3 recorded nothing",
			members: func(t *testing.T) []Member {
				return []Member{task(t, 0, "n1", 1300, code(1), peerClosed), task(t, 1, "n1", 1350, code(1), peerClosed),
					task(t, 2, "n2", 1200, code(1), peerClosed)}
			},
			reason: diagnose.PeerFailed, root: -1, missing: []int{3}, notes: []string{"rank 3 of 4 recorded nothing"}, collat: []int{0, 1, 2},
		},
		{
			name: "a rank recorded twice counts by its newest record",
			members: func(t *testing.T) []Member {
				old := task(t, 3, "n2", 500, sig(syscall.SIGSEGV), segv)
				old.Written = at(-5000)
				return []Member{old, task(t, 0, "n1", 1300, code(1), peerClosed), task(t, 1, "n1", 1350, code(1), peerClosed),
					task(t, 2, "n2", 1200, code(1), peerClosed), task(t, 3, "n2", 1000, sig(syscall.SIGKILL))}
			},
			reason: diagnose.Killed, root: 3, rootNode: "n2", order: "evidence", collat: []int{0, 1, 2},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := JudgeGroup("4242", tt.members(t))
			if g.Reason != tt.reason {
				t.Errorf("reason %q, want %q (%s)", g.Reason, tt.reason, g.Summary)
			}
			if tt.root < 0 {
				if g.RootCause != nil {
					t.Errorf("root cause %+v, want none", g.RootCause)
				}
			} else {
				if g.RootCause == nil || g.RootCause.Rank != tt.root || g.RootCause.Node != tt.rootNode || g.RootCause.Order != tt.order {
					t.Fatalf("root cause %+v, want rank %d on %s by %s", g.RootCause, tt.root, tt.rootNode, tt.order)
				}
				if !strings.Contains(g.RootCause.How, tt.rootCause) {
					t.Errorf("how %q, want it to say %q", g.RootCause.How, tt.rootCause)
				}
				if g.RootCause.Reason != tt.reason || g.RootCause.RunID == "" || g.RootCause.PID == 0 {
					t.Errorf("root cause %+v", g.RootCause)
				}
			}
			collat := map[int]bool{}
			for _, c := range tt.collat {
				collat[c] = true
			}
			for _, r := range g.Ranks {
				if r.Collateral != collat[r.Rank.Rank] {
					t.Errorf("rank %d: collateral %v", r.Rank.Rank, r.Collateral)
				}
				if r.Collateral && tt.root >= 0 {
					want := "rank " + itoa(tt.root) + " on " + tt.rootNode + " failed first"
					if r.Reason != diagnose.PeerFailed || len(r.Evidence) < 2 || !strings.HasPrefix(r.Evidence[0], want) {
						t.Errorf("rank %d: reason %s evidence %q, want peer_failed, %q, then what it died of", r.Rank.Rank, r.Reason, r.Evidence, want)
					}
				}
				if r.Rank.Rank == tt.root && (r.Collateral || r.Reason != tt.reason) {
					t.Errorf("root rank %d: reason %s collateral %v", r.Rank.Rank, r.Reason, r.Collateral)
				}
			}
			if len(g.Missing) != len(tt.missing) {
				t.Errorf("missing %v, want %v", g.Missing, tt.missing)
			}
			notes := strings.Join(g.Notes, "\n")
			for _, n := range tt.notes {
				if !strings.Contains(notes, n) {
					t.Errorf("notes %q, want one saying %q", g.Notes, n)
				}
			}
			if len(tt.notes) == 0 && len(g.Notes) > 0 {
				t.Errorf("notes %q, want none", g.Notes)
			}
		})
	}
}

// TestJudgeGroupNodesAndStates: nodes are listed once, sorted; a rank
// still running makes the job running; ranks that all exited 0 succeed.
func TestJudgeGroupNodesAndStates(t *testing.T) {
	ok := []Member{task(t, 0, "n2", 1000, code(0)), task(t, 1, "n1", 1000, code(0)), task(t, 2, "n1", 1000, code(0))}
	g := JudgeGroup("4242", ok)
	if g.Reason != diagnose.Success || g.RootCause != nil || strings.Join(g.Nodes, ",") != "n1,n2" {
		t.Errorf("reason %s root %v nodes %v", g.Reason, g.RootCause, g.Nodes)
	}
	run := Member{Group: "4242", Status: MemberRunning, Rank: Rank{Rank: 3, Node: "n2"}, Written: at(0)}
	g = JudgeGroup("4242", append(ok, run))
	if g.Reason != MemberRunning || !strings.Contains(g.Summary, "1 rank of 4 still running") {
		t.Errorf("reason %s summary %q", g.Reason, g.Summary)
	}
	if JudgeGroup("4242", nil) != nil {
		t.Error("a group with no members has a story")
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
