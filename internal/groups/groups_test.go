package groups

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/diagnose"
	"github.com/vramguard/vramguard/internal/postmortem"
	"github.com/vramguard/vramguard/internal/ranks"
)

func TestEscape(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"4242", "4242"},
		{"my-job_2.b", "my-job_2.b"},
		{"..", "%2E."},
		{".hidden", "%2Ehidden"},
		{"a/b", "a%2Fb"},
		{"x y", "x%20y"},
	} {
		if got := escape(tt.in); got != tt.want {
			t.Errorf("escape(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func member(group string, rank int, node string, failure string, at time.Time) ranks.Member {
	sig := "SIGKILL"
	rk := ranks.Rank{Rank: rank, Node: node, PID: 100 + rank, Reason: diagnose.Killed, Signal: &sig, Evidence: []string{"ended by SIGKILL"}}
	if failure == ranks.FailureConsequence {
		rk.Reason, rk.Collateral, rk.Signal = diagnose.PeerFailed, true, nil
		rk.Evidence = []string{"a peer closed its connection: RuntimeError: Connection closed by peer"}
	}
	return ranks.Member{Group: group, RunID: "run-" + node, Host: node, Status: ranks.MemberEnded, Rank: rk, Failure: failure, FailedAt: at, Written: at}
}

// TestDirWriteRead: one file per rank, replaced whole; what is not a whole
// record of the group of this user's (a temporary file a writer left,
// another group's record, a damaged file, a link, another user's file) is
// not read, and another user's group directory is not written into.
func TestDirWriteRead(t *testing.T) {
	d := Dir(t.TempDir())
	now := time.Now()
	for r := 0; r < 3; r++ {
		if err := d.Write(member("4242", r, "n1", ranks.FailureConsequence, now)); err != nil {
			t.Fatal(err)
		}
	}
	// rank 2 again: its newer record replaces the old
	if err := d.Write(member("4242", 2, "n2", ranks.FailureExternal, now.Add(time.Second))); err != nil {
		t.Fatal(err)
	}
	dir := d.Path("4242")
	os.WriteFile(filepath.Join(dir, ".rank-3-123.tmp"), []byte(`{"group":"4242","rank":{"rank":3`), 0o600)
	os.WriteFile(filepath.Join(dir, "rank-4.json"), []byte(`{"group":"4242","rank":{"ra`), 0o600)
	os.WriteFile(filepath.Join(dir, "rank-5.json"), []byte(`{"group":"other","rank":{"rank":5}}`), 0o600)
	os.Symlink("/etc/passwd", filepath.Join(dir, "rank-6.json"))
	if os.Geteuid() == 0 {
		// another user's record, planted in a directory others may write
		p := filepath.Join(dir, "rank-7.json")
		os.WriteFile(p, []byte(`{"group":"4242","rank":{"rank":7}}`), 0o644)
		os.Chown(p, 65534, 65534)
		// and a group directory another user made first
		other := d.Path("4244")
		os.MkdirAll(other, 0o777)
		os.Chown(other, 65534, 65534)
		if err := d.Write(member("4244", 0, "n1", ranks.FailureOK, now)); err == nil || !strings.Contains(err.Error(), "not a directory of this user's") {
			t.Errorf("writing into another user's group directory: %v", err)
		}
	}
	ms, err := d.Read("4242")
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 3 {
		t.Fatalf("%d records, want 3: %+v", len(ms), ms)
	}
	for _, m := range ms {
		if m.Rank.Rank == 2 && (m.Rank.Node != "n2" || m.Failure != ranks.FailureExternal) {
			t.Errorf("rank 2's record is its first, not its newest: %+v", m)
		}
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".tmp") && e.Name() != ".rank-3-123.tmp" {
			t.Errorf("a writer left %s", e.Name())
		}
	}
	if _, err := d.Read("4243"); err == nil || !strings.Contains(err.Error(), "no record of the group 4243") {
		t.Errorf("an unknown group: %v", err)
	}
	// a group name is one path element, whatever it holds
	if err := d.Write(member("../x", 0, "n1", ranks.FailureOK, now)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(string(d), "%2E.%2Fx", "rank-0.json")); err != nil {
		t.Errorf("group ../x: %v", err)
	}
}

// fakeClock is a Recorder's clock: each Sleep moves it on by the time
// asked and counts the reads of the group's records it separates;
// atSleep runs after the nth Sleep (what another node does meanwhile).
type fakeClock struct {
	mu      sync.Mutex
	t       time.Time
	sleeps  int
	atSleep func(n int)
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.sleeps++
	n := c.sleeps
	c.mu.Unlock()
	if c.atSleep != nil {
		c.atSleep(n)
	}
}

// peerFailedRun is an ended attempt whose one rank (0, on n1) only read a
// peer's failure.
func peerFailedRun(group string, at time.Time) *postmortem.Postmortem {
	pm := &postmortem.Postmortem{Verdict: diagnose.Verdict{Reason: diagnose.PeerFailed, Summary: "every rank of the job ended because another rank failed",
		Advice: []string{"Find the rank that failed first: on another node, its own run (`vramguard explain` there); here, read every rank's log (`vramguard logs RUN`).", "keep"}}}
	m0 := member(group, 0, "n1", ranks.FailureConsequence, at)
	m0.Rank.FailedAt = m0.FailedAt
	m0.Rank.Failure = m0.Failure
	pm.Ranks = []ranks.Rank{m0.Rank}
	return pm
}

// checkNamesRank3 checks pm names rank 3 on n2, the first failure of
// group 4242, as its root cause, in its summary, advice and evidence.
func checkNamesRank3(t *testing.T, d Dir, pm *postmortem.Postmortem) {
	t.Helper()
	if pm.RootCause == nil || pm.RootCause.Rank != 3 || pm.RootCause.Node != "n2" {
		t.Fatalf("root cause %+v, want rank 3 on n2", pm.RootCause)
	}
	if !strings.Contains(pm.Summary, "rank 3 on n2 failed first") || pm.Reason != diagnose.PeerFailed {
		t.Errorf("verdict %s: %s", pm.Reason, pm.Summary)
	}
	adv := strings.Join(pm.Advice, "\n")
	if !strings.Contains(adv, "`vramguard explain --group 4242`") || strings.Contains(adv, "Find the rank that failed first") || !strings.Contains(adv, "keep") {
		t.Errorf("advice:\n%s", adv)
	}
	if !strings.HasPrefix(pm.Ranks[0].Evidence[0], "rank 3 on n2 failed first") {
		t.Errorf("rank 0's evidence %q", pm.Ranks[0].Evidence)
	}
	ms, err := d.Read("4242")
	if err != nil || len(ms) != 2 {
		t.Fatalf("records %v %v, want this run's rank 0 and rank 3", ms, err)
	}
}

func rank3Record(at time.Time) ranks.Member {
	m3 := member("4242", 3, "n2", ranks.FailureExternal, at.Add(-time.Second))
	m3.Summary = "the job was killed with SIGKILL"
	return m3
}

// TestRecorderNamesTheFirstFailure: a run whose one rank only read a
// peer's failure waits for the first failure's record, which its node
// writes after a while, and names that rank, its node and the command that
// tells the whole story; the advice to go and find it is gone. It reads
// the records again every pollEvery, and stops at the first read that
// finds the record: the reads are counted on a fake clock, so how busy
// the machine is cannot change the outcome.
func TestRecorderNamesTheFirstFailure(t *testing.T) {
	for _, tt := range []struct {
		name       string
		wait       time.Duration
		writeAfter int // the record is written after this many sleeps (0: before Ended)
		wantSleeps int
	}{
		{"already there", 5 * time.Second, 0, 0},
		{"after one read", 5 * time.Second, 1, 1},
		{"after three reads", 5 * time.Second, 3, 3},
		{"at the last read", time.Second, 5, 5},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := Dir(t.TempDir())
			clk := &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
			start := clk.t
			clk.atSleep = func(n int) {
				if n == tt.writeAfter {
					if err := d.Write(rank3Record(clk.Now())); err != nil {
						t.Error(err)
					}
				}
			}
			if tt.writeAfter == 0 {
				if err := d.Write(rank3Record(start)); err != nil {
					t.Fatal(err)
				}
			}
			rec := &Recorder{Dir: d, Group: "4242", RunID: "run-a", Host: "n1", Wait: tt.wait, Now: clk.Now, Sleep: clk.Sleep}
			pm := peerFailedRun("4242", start)
			rec.Ended(context.Background(), pm)
			if clk.sleeps != tt.wantSleeps {
				t.Errorf("Ended slept %d times, want %d: it reads until the record is there, no longer", clk.sleeps, tt.wantSleeps)
			}
			if el := clk.Now().Sub(start); el != time.Duration(tt.wantSleeps)*pollEvery {
				t.Errorf("Ended waited %s of its clock, want %s", el, time.Duration(tt.wantSleeps)*pollEvery)
			}
			checkNamesRank3(t, d, pm)
		})
	}
}

// TestRecorderWaitsOnTheWallClock: with the wall clock (no Now, no
// Sleep), a record another node writes while the run waits is found.
// Wait is far longer than the write takes on the busiest machine; nothing
// here is timed, Ended returns as its read finds the record.
func TestRecorderWaitsOnTheWallClock(t *testing.T) {
	d := Dir(t.TempDir())
	rec := &Recorder{Dir: d, Group: "4242", RunID: "run-a", Host: "n1", Wait: 2 * time.Minute}
	pm := peerFailedRun("4242", time.Now())
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(300 * time.Millisecond)
		if err := d.Write(rank3Record(time.Now())); err != nil {
			t.Error(err)
		}
	}()
	rec.Ended(context.Background(), pm)
	<-done
	checkNamesRank3(t, d, pm)
}

// TestRecorderNoRecord: with no first failure recorded within Wait, the
// run says so and where the whole story is, after reading the records
// until Wait has passed on its clock and no later; an ended context ends
// the wait at once.
func TestRecorderNoRecord(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tt := range []struct {
		name       string
		ctx        context.Context
		wait       time.Duration
		wantSleeps int
	}{
		{"400ms", context.Background(), 400 * time.Millisecond, 2},
		{"500ms", context.Background(), 500 * time.Millisecond, 3}, // the third read is past the deadline
		{"default", context.Background(), 0, int(DefaultWait / pollEvery)},
		{"context ended", cancelled, 400 * time.Millisecond, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := Dir(t.TempDir())
			clk := &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
			start := clk.t
			rec := &Recorder{Dir: d, Group: "job 7", RunID: "run-a", Host: "n1", Wait: tt.wait, Now: clk.Now, Sleep: clk.Sleep}
			m0 := member("job 7", 0, "n1", ranks.FailureConsequence, start)
			m0.Rank.Failure = m0.Failure
			pm := &postmortem.Postmortem{Verdict: diagnose.Verdict{Reason: diagnose.PeerFailed}, Ranks: []ranks.Rank{m0.Rank}}
			rec.Ended(tt.ctx, pm)
			if clk.sleeps != tt.wantSleeps {
				t.Errorf("Ended slept %d times (%s of its clock), want %d", clk.sleeps, clk.Now().Sub(start), tt.wantSleeps)
			}
			if pm.RootCause != nil || len(pm.Advice) == 0 || !strings.Contains(pm.Advice[0], "`vramguard explain --group 'job 7'`") {
				t.Errorf("root %v advice %q", pm.RootCause, pm.Advice)
			}
			wait := tt.wait
			if wait == 0 {
				wait = DefaultWait
			}
			if want := "within " + wait.String(); !strings.Contains(pm.Advice[0], want) {
				t.Errorf("advice %q does not say %q", pm.Advice[0], want)
			}
		})
	}
}

func TestNetworkFS(t *testing.T) {
	for _, tt := range []struct {
		magic int64
		want  string
	}{
		{0x6969, "nfs"}, {0xff534d42, "cifs"}, {0xfe534d42, "smb2"}, {0x0bd00bd0, "lustre"}, {0x47504653, "gpfs"},
		{0xef53, ""}, {0x01021994, ""}, {0x9123683e, ""}, // ext4, tmpfs, btrfs
	} {
		if got := NetworkKind(tt.magic); got != tt.want {
			t.Errorf("NetworkKind(%#x) = %q, want %q", tt.magic, got, tt.want)
		}
	}
	// a real local directory, and one not made yet (its parent is read)
	dir := t.TempDir()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	want := NetworkKind(int64(st.Type))
	if got := NetworkFS(filepath.Join(dir, "not", "yet")); got != want {
		t.Errorf("NetworkFS of a path not made yet: %q, want its parent's %q", got, want)
	}
}
