package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	tea "github.com/vramguard/vramguard/internal/third_party/bubbletea"

	"github.com/vramguard/vramguard/internal/attrib"
)

func topFactory(tty bool) (*Factory, *bytes.Buffer, *bytes.Buffer) {
	out, errOut := &bytes.Buffer{}, &bytes.Buffer{}
	f := &Factory{
		IO:     IOStreams{In: strings.NewReader(""), Out: out, ErrOut: errOut, IsTTY: tty},
		Now:    func() time.Time { return time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC) },
		Getenv: func(string) string { return "" },
	}
	return f, out, errOut
}

func runTopCmd(t *testing.T, tty bool, args ...string) (string, string, error) {
	t.Helper()
	f, out, errOut := topFactory(tty)
	cmd := NewCmdTop(f)
	cmd.SetArgs(args)
	cmd.SetOut(out)
	cmd.SetErr(errOut)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err := cmd.Execute()
	return out.String(), errOut.String(), err
}

func topExitCode(err error) int {
	var ee *ExitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	if err != nil {
		return -1
	}
	return 0
}

func TestTopBadUsage(t *testing.T) {
	tests := []struct {
		name string
		tty  bool
		args []string
		code int
		want string
	}{
		{"bad sort", false, []string{"--once", "--sort", "vram"}, ExitUsage, "--sort"},
		{"json without once", false, []string{"--json"}, ExitUsage, "--json needs --once"},
		{"interval too short", false, []string{"--once", "--interval", "200ms"}, ExitUsage, "at most once a second"},
		{"missing scenario", false, []string{"--once", "--simulate", "/nonexistent.json"}, ExitUsage, "scenario file /nonexistent.json: no such file or directory"},
		{"bad backend", false, []string{"--once", "--gpu-backend", "cuda"}, ExitUsage, "want auto, nvml, none or sim:PATH"},
		{"simulate and backend", false, []string{"--once", "--simulate", "x.json", "--gpu-backend", "nvml"}, ExitUsage, "cannot be used together"},
		{"nvml without driver", false, []string{"--once", "--gpu-backend", "nvml"}, ExitEnv, "no NVIDIA driver found"},
		{"no terminal", false, nil, ExitUsage, "needs a terminal"},
		{"negative grace", true, []string{"--kill-grace", "-1s"}, ExitUsage, "kill-grace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := runTopCmd(t, tt.tty, tt.args...)
			if topExitCode(err) != tt.code || err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v (exit %d), want exit %d mentioning %q", err, topExitCode(err), tt.code, tt.want)
			}
		})
	}
}

// Without a driver, auto shows no GPUs, exits 0 and says why.
func TestTopWithoutDriverSaysSo(t *testing.T) {
	out, _, err := runTopCmd(t, false, "--once", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var snap map[string]any
	if err := json.Unmarshal([]byte(out), &snap); err != nil {
		t.Fatal(err)
	}
	if snap["backend"] != "none" || !strings.Contains(snap["note"].(string), "no NVIDIA driver found") {
		t.Fatalf("backend %v note %v", snap["backend"], snap["note"])
	}
	_, errOut, err := runTopCmd(t, false, "--once")
	if err != nil || !strings.Contains(errOut, "no NVIDIA driver found") {
		t.Fatalf("human output: err %v, stderr %q", err, errOut)
	}
}

func TestTopOnceJSONSimulated(t *testing.T) {
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "proc"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, _, err := runTopCmd(t, false, "--once", "--json", "--proc-root", root,
		"--simulate", "../../examples/scenarios/leak-and-orphans.json")
	if err != nil {
		t.Fatal(err)
	}
	var snap struct {
		Backend       string `json:"backend"`
		Devices       []map[string]any
		Jobs          []attrib.Job
		Vanished      []map[string]any
		VanishedBytes uint64 `json:"vanished_bytes"`
		Dropped       map[string]int
	}
	dec := json.NewDecoder(strings.NewReader(out))
	if err := dec.Decode(&snap); err != nil {
		t.Fatal(err)
	}
	if snap.Backend != "sim" || len(snap.Devices) != 1 {
		t.Fatalf("backend %q, %d devices", snap.Backend, len(snap.Devices))
	}
	if len(snap.Jobs) != 3 {
		t.Fatalf("%d jobs, want the leaky trainer and two orphans: %s", len(snap.Jobs), out)
	}
	lead := snap.Jobs[0]
	if lead.Name != "python3 train_leaky.py" || len(lead.Processes) != 2 || lead.Processes[1].Role != "worker" {
		t.Errorf("first job %q with %d processes; want the trainer with its worker", lead.Name, len(lead.Processes))
	}
	if !snap.Jobs[1].Orphan || !snap.Jobs[2].Orphan {
		t.Errorf("orphans not flagged: %+v %+v", snap.Jobs[1], snap.Jobs[2])
	}
	if len(snap.Vanished) != 1 || snap.VanishedBytes != 3<<30 {
		t.Errorf("vanished %v (%d bytes), want PID 4194000 with 3 GiB", snap.Vanished, snap.VanishedBytes)
	}
	if snap.Dropped["bad_pid"] != 2 || snap.Dropped["over_device"] != 1 {
		t.Errorf("dropped %v, want 2 bad PIDs and 1 over the device", snap.Dropped)
	}
	for _, key := range []string{`"devices"`, `"jobs"`, `"processes"`} {
		if !strings.Contains(out, key) {
			t.Errorf("JSON lacks %s", key)
		}
	}
}

func TestArrangeJobs(t *testing.T) {
	jobs := []attrib.Job{
		{Key: "a", Kind: attrib.KindProcess, Name: "alpha", RootPID: 30, GPUBytes: 1, RSSBytes: 9},
		{Key: "b", Kind: attrib.KindProcess, Name: "beta", RootPID: 20, GPUBytes: 81, RSSBytes: 1},
		{Key: "c", Kind: attrib.KindRun, Name: "gamma", RootPID: 40, GPUBytes: 2, RSSBytes: 2},
		{Key: "d", Kind: attrib.KindPod, Name: "delta", RootPID: 10, GPUBytes: 3, RSSBytes: 3,
			Processes: []attrib.Process{{PID: 11, Cmdline: []string{"python", "serve.py"}}}},
		{Key: "e", Kind: attrib.KindService, Name: "epsilon", RootPID: 50, GPUBytes: 2, RSSBytes: 20},
	}
	keys := func(js []attrib.Job) string {
		var s string
		for _, j := range js {
			s += j.Key
		}
		return s
	}
	tests := []struct {
		sort, filter string
		group        bool
		want         string
	}{
		// one order across every kind: the 81-byte process first
		{"gpu", "", false, "bdcea"},
		{"rss", "", false, "eadcb"},
		{"pid", "", false, "dbace"},
		{"name", "", false, "abdec"},
		// grouped: the groups follow the key too (processes hold 82, the
		// pod 3, the run 2, the service 2: run before service by kind),
		// and the jobs are sorted within them
		{"gpu", "", true, "badce"},
		{"rss", "", true, "eabdc"},
		{"pid", "", true, "dbace"},
		{"name", "", true, "dabec"},
		{"gpu", "ALPHA", false, "a"},
		{"gpu", "serve", false, "d"},
		{"gpu", "11", false, "d"},
		{"gpu", "run", false, "c"},
		{"gpu", "nothing", false, ""},
	}
	for _, tt := range tests {
		if got := keys(arrangeJobs(jobs, tt.sort, tt.filter, tt.group)); got != tt.want {
			t.Errorf("arrangeJobs(%s, %q, group %v) = %s, want %s", tt.sort, tt.filter, tt.group, got, tt.want)
		}
	}
}

// TestSortProcs: an expanded job's processes follow the sort key too.
func TestSortProcs(t *testing.T) {
	ps := []attrib.Process{
		{PID: 100, Comm: "torchrun", Role: "main", RSSBytes: 1},
		{PID: 101, Comm: "python3", Role: "gpu", GPUBytes: 30, RSSBytes: 6},
		{PID: 102, Comm: "python3", Role: "gpu", GPUBytes: 34, RSSBytes: 5},
		{PID: 103, Comm: "pt_data_worker", Role: "worker", RSSBytes: 9},
	}
	pids := func(ps []attrib.Process) string {
		var s []string
		for _, p := range ps {
			s = append(s, strconv.Itoa(p.PID))
		}
		return strings.Join(s, " ")
	}
	for sortBy, want := range map[string]string{
		"gpu":  "102 101 100 103",
		"rss":  "103 101 102 100",
		"pid":  "100 101 102 103",
		"name": "103 101 102 100",
	} {
		if got := pids(sortProcs(ps, sortBy)); got != want {
			t.Errorf("sortProcs(%s) = %s, want %s", sortBy, got, want)
		}
	}
	if pids(ps) != "100 101 102 103" {
		t.Errorf("sortProcs changed the job's own slice: %s", pids(ps))
	}
}

// TestOwnerLabelPod: a pod the kubelet's log directory names shows as
// namespace/name, one it does not name by its short UID.
func TestOwnerLabelPod(t *testing.T) {
	uid := "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
	for _, tc := range []struct {
		name string
		ctx  attrib.Context
		want string
	}{
		{"named", attrib.Context{PodUID: uid, Namespace: "ml-team", PodName: "llama-0", Runtime: "containerd", ContainerID: "abcdef0123456789"},
			"pod ml-team/llama-0 containerd abcdef012345"},
		{"unnamed", attrib.Context{PodUID: uid, Runtime: "containerd", ContainerID: "abcdef0123456789"},
			"pod 0f1e2d3c containerd abcdef012345"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ownerLabel(attrib.Job{Kind: attrib.KindPod, Context: tc.ctx})
			if got != tc.want {
				t.Errorf("ownerLabel = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestTopOwnerFilter: --user keeps one owner's jobs (by name or UID),
// --mine the caller's; every job carries its UID and user name.
func TestTopOwnerFilter(t *testing.T) {
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "proc"), 0o755); err != nil {
		t.Fatal(err)
	}
	me := strconv.Itoa(os.Getuid())
	tests := []struct {
		name string
		args []string
		uid  int
		want []int // root PIDs
	}{
		{"every owner", nil, -1, []int{940000, 942000, 945001, 943000, 941000, 945002, 944001}},
		{"by name", []string{"--user", "alice"}, 1001, []int{942000, 944001}},
		{"by uid", []string{"--user", "1002"}, 1002, []int{945001}},
		{"uid nobody runs", []string{"--user", "4242"}, 4242, []int{}},
		{"mine", []string{"--mine"}, os.Getuid(), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"--once", "--json", "--proc-root", root, "--simulate", "testdata/top/scenario.json"}, tt.args...)
			out, _, err := runTopCmd(t, false, args...)
			if err != nil {
				t.Fatal(err)
			}
			var snap struct{ Jobs []attrib.Job }
			if err := json.Unmarshal([]byte(out), &snap); err != nil {
				t.Fatal(err)
			}
			pids := []int{}
			for _, j := range snap.Jobs {
				pids = append(pids, j.RootPID)
				if tt.uid >= 0 && j.UID != tt.uid {
					t.Errorf("job %d: uid %d, want only %d", j.RootPID, j.UID, tt.uid)
				}
				if j.User == "" || j.Processes[0].User != j.User {
					t.Errorf("job %d: user %q, its root process's %q", j.RootPID, j.User, j.Processes[0].User)
				}
				if j.UID == 1001 && j.User != "alice" {
					t.Errorf("job %d: uid 1001 named %q, the scenario says alice", j.RootPID, j.User)
				}
			}
			if tt.want != nil && !slices.Equal(pids, tt.want) {
				t.Errorf("jobs %v, want %v", pids, tt.want)
			}
			if tt.name == "mine" && me == "0" && !slices.Equal(pids, []int{940000, 943000}) {
				t.Errorf("--mine as root: jobs %v, want root's 940000 and 943000", pids)
			}
		})
	}
	_, _, err := runTopCmd(t, false, "--once", "--proc-root", root, "--simulate", "testdata/top/scenario.json", "--user", "no-such-user-here")
	if topExitCode(err) != ExitUsage || !strings.Contains(err.Error(), "no such user") {
		t.Errorf("unknown user: %v", err)
	}
	_, _, err = runTopCmd(t, false, "--once", "--user", "root", "--mine")
	if topExitCode(err) != ExitUsage || !strings.Contains(err.Error(), "cannot be used together") {
		t.Errorf("--user with --mine: %v", err)
	}
}

// The terminal reader hands the runes of one read as one message: keys
// typed faster than it reads ("/", then "train") are still each a key.
func TestTopKeysOfOneRead(t *testing.T) {
	tests := []struct {
		name    string
		msgs    []tea.KeyMsg
		filter  string
		editing bool
		sortBy  string
	}{
		{"slash and text in one read", []tea.KeyMsg{runes("/train"), {Type: tea.KeyEnter}}, "train", false, "gpu"},
		{"sort, then filter, in one read", []tea.KeyMsg{runes("s/ab")}, "ab", true, "rss"},
		{"one key per read", []tea.KeyMsg{runes("/"), runes("x"), runes("y"), {Type: tea.KeyEnter}}, "xy", false, "gpu"},
		{"a paste is text, not keys", []tea.KeyMsg{runes("/"), {Type: tea.KeyRunes, Runes: []rune("s/q"), Paste: true}}, "s/q", true, "gpu"},
		{"a paste outside the filter presses nothing", []tea.KeyMsg{{Type: tea.KeyRunes, Runes: []rune("s/"), Paste: true}}, "", false, "gpu"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &topModel{opts: &topOptions{}, sortBy: "gpu", expanded: map[string]bool{}}
			for _, k := range tt.msgs {
				m.Update(k)
			}
			if m.filter != tt.filter || m.editing != tt.editing || m.sortBy != tt.sortBy {
				t.Errorf("filter %q editing %v sort %s, want %q %v %s", m.filter, m.editing, m.sortBy, tt.filter, tt.editing, tt.sortBy)
			}
		})
	}
	// a quit among the runes still quits
	m := &topModel{opts: &topOptions{}, sortBy: "gpu", expanded: map[string]bool{}}
	if _, cmd := m.Update(runes("sq")); cmd == nil {
		t.Error(`"sq" in one read gave no command, want quit`)
	} else if _, ok := cmd().(tea.QuitMsg); !ok {
		t.Errorf(`"sq" in one read: %T, want tea.QuitMsg`, cmd())
	}
}

func runes(s string) tea.KeyMsg { return tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(s)} }
