package probe

import (
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestEnv(t *testing.T) {
	cases := []struct {
		name string
		in   []string
		o    Options
		want []string
	}{
		{
			name: "no PYTHONPATH; defaults",
			in:   []string{"HOME=/h", "PATH=/bin"},
			o:    Options{Socket: "/s/p.sock"},
			want: []string{"HOME=/h", "PATH=/bin", "PYTHONPATH=/probe", "VRAMGUARD_PROBE_SOCKET=/s/p.sock", "VRAMGUARD_PROBE_HZ=1",
				"VRAMGUARD_RUN_DIR=", "VRAMGUARD_OOM_SNAPSHOT=0", "VRAMGUARD_ATOMIC_SAVE=0", "VRAMGUARD_RUN_ID=", "VRAMGUARD_ATTEMPT=0"},
		},
		{
			name: "prepends to PYTHONPATH, replaces stale probe variables, caps Hz",
			in:   []string{"PYTHONPATH=/a:/b", "VRAMGUARD_PROBE_HZ=3", "VRAMGUARD_RUN_ID=old", "X=1"},
			o:    Options{Socket: "/s", Hz: 50, RunDir: "/r", OOMSnapshot: true, AtomicSave: true, RunID: "new", Attempt: 2},
			want: []string{"X=1", "PYTHONPATH=/probe:/a:/b", "VRAMGUARD_PROBE_SOCKET=/s", "VRAMGUARD_PROBE_HZ=20",
				"VRAMGUARD_RUN_DIR=/r", "VRAMGUARD_OOM_SNAPSHOT=1", "VRAMGUARD_ATOMIC_SAVE=1", "VRAMGUARD_RUN_ID=new", "VRAMGUARD_ATTEMPT=2"},
		},
		{
			name: "empty PYTHONPATH; fractional Hz",
			in:   []string{"PYTHONPATH="},
			o:    Options{Hz: 0.5},
			want: []string{"PYTHONPATH=/probe", "VRAMGUARD_PROBE_SOCKET=", "VRAMGUARD_PROBE_HZ=0.5",
				"VRAMGUARD_RUN_DIR=", "VRAMGUARD_OOM_SNAPSHOT=0", "VRAMGUARD_ATOMIC_SAVE=0", "VRAMGUARD_RUN_ID=", "VRAMGUARD_ATTEMPT=0"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(tc.in)
			got := Env(in, "/probe", tc.o)
			if !slices.Equal(got, tc.want) {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
			if !slices.Equal(in, tc.in) {
				t.Errorf("Env modified its input")
			}
		})
	}
}

// Concurrent installs into one directory agree on one complete copy.
func TestInstallConcurrent(t *testing.T) {
	dir := t.TempDir()
	var wg sync.WaitGroup
	dirs := make([]string, 8)
	errs := make([]error, 8)
	for i := range dirs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dirs[i], errs[i] = Install(dir)
		}()
	}
	wg.Wait()
	for i := range dirs {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if dirs[i] != dirs[0] {
			t.Fatalf("installs disagree: %q vs %q", dirs[i], dirs[0])
		}
	}
	for name, want := range Files() {
		got, err := os.ReadFile(filepath.Join(dirs[0], name))
		if err != nil || string(got) != string(want) {
			t.Errorf("%s: %v (equal %v)", name, err, string(got) == string(want))
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("leftovers in %s: %v", dir, entries)
	}
	for _, need := range []string{"sitecustomize.py", "vramguard/__init__.py", "vramguard/_probe.py"} {
		if _, ok := Files()[need]; !ok {
			t.Errorf("embedded probe lacks %s", need)
		}
	}
	// Reinstall is a no-op returning the same directory.
	again, err := Install(dir)
	if err != nil || again != dirs[0] {
		t.Errorf("reinstall: %q %v", again, err)
	}
}

func TestListener(t *testing.T) {
	l := listen(t)
	st, err := os.Stat(l.Path())
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want socket 0600", st.Mode())
	}
	if dst, _ := os.Stat(filepath.Dir(l.Path())); dst.Mode().Perm() != 0o700 {
		t.Errorf("socket dir mode %v, want 0700", dst.Mode().Perm())
	}
	c, err := net.Dial("unix", l.Path())
	if err != nil {
		t.Fatal(err)
	}
	lines := `{"v":1,"type":"hello","pid":41,"ts":1700000000.5,"argv":["python","train.py"]}
not json
{"v":1,"type":"sample","pid":41,"ts":1700000001,"rss_bytes":1024,"optimizer_steps":7,"cuda":[{"device":0,"allocated_bytes":5,"allocated_peak_bytes":9,"reserved_bytes":16,"reserved_peak_bytes":32}]}
{"v":2,"type":"future","pid":41,"ts":1700000002,"something":{"new":true}}
`
	if _, err := c.Write([]byte(lines)); err != nil {
		t.Fatal(err)
	}
	c.Close()
	var got []Message
	timeout := time.After(10 * time.Second)
	for len(got) < 5 {
		select {
		case m := <-l.Messages():
			got = append(got, m)
		case <-timeout:
			t.Fatalf("got only %d messages", len(got))
		}
	}
	types := []string{}
	for _, m := range got {
		types = append(types, m.Type)
		if m.PeerPID != os.Getpid() {
			t.Errorf("peer pid %d, want %d", m.PeerPID, os.Getpid())
		}
	}
	if !slices.Equal(types, []string{"hello", "invalid", "sample", "future", "disconnect"}) {
		t.Errorf("types %v", types)
	}
	if got[0].Time() != time.Unix(1700000000, 500000000) || got[0].Argv[1] != "train.py" {
		t.Errorf("hello: %+v", got[0])
	}
	if got[1].Line != "not json" || got[2].OptimizerSteps != 7 || got[2].CUDA[0].ReservedPeakBytes != 32 || got[2].CUDA[0].RequestedBytes != nil {
		t.Errorf("decoded: %+v / %+v", got[1], got[2])
	}
	if got[4].PID != 41 {
		t.Errorf("disconnect carries pid %d, want the connection's last pid 41", got[4].PID)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-l.Messages(); ok {
		t.Error("Messages not closed after Close")
	}
	if _, err := os.Stat(l.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket file left after Close: %v", err)
	}
}

// Close returns even while connections are open and nobody reads.
func TestListenerCloseWithBlockedConnections(t *testing.T) {
	l := listen(t)
	var conns []net.Conn
	for range 3 {
		c, err := net.Dial("unix", l.Path())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		c.Write([]byte(strings.Repeat(`{"v":1,"type":"sample","pid":1}`+"\n", 2000)))
	}
	done := make(chan error)
	go func() { done <- l.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close blocked")
	}
	for _, c := range conns {
		c.Close()
	}
}

func TestListenRejectsLongPath(t *testing.T) {
	p := "/tmp/" + strings.Repeat("x", 120) + "/p.sock"
	if _, err := Listen(p); err == nil || !strings.Contains(err.Error(), "at most 107") {
		t.Errorf("err = %v", err)
	}
}

func i64(v int64) *int64 { return &v }
func intp(v int) *int    { return &v }
func boolp(v bool) *bool { return &v }

func TestSummary(t *testing.T) {
	msgs := []Message{
		{Type: TypeHello, PID: 10, TS: 1},
		{Type: TypeSample, PID: 10, TS: 2, RSSBytes: 100, OptimizerSteps: 3,
			CUDA: []DeviceStats{{Device: 0, AllocatedPeakBytes: 50, ReservedPeakBytes: 80, NumAllocRetries: 1}, {Device: 1, AllocatedPeakBytes: 70, ReservedPeakBytes: 75}}},
		{Type: TypeSample, PID: 11, TS: 2, RSSBytes: 300, OptimizerSteps: 2,
			CUDA: []DeviceStats{{Device: 0, AllocatedPeakBytes: 60, ReservedPeakBytes: 64, NumAllocRetries: 4}}},
		{Type: TypeSample, PID: 10, TS: 3, RSSBytes: 120, OptimizerSteps: 9,
			CUDA: []DeviceStats{{Device: 0, AllocatedPeakBytes: 55, ReservedPeakBytes: 80, NumAllocRetries: 2, NumOOMs: 1}}},
		{Type: TypeCkpt, PID: 10, TS: 4, Path: "/c/a.pt", Bytes: i64(1000), Seconds: 0.5, OK: boolp(true), OptimizerSteps: 9},
		{Type: TypeCkpt, PID: 10, TS: 5, Path: "/c/b.pt", Seconds: 0.1, OK: boolp(false), Error: "OSError: disk full"},
		{Type: TypeOOM, PID: 11, TS: 6, Source: "observer", Device: intp(0), AllocBytes: i64(1 << 30), SnapshotPath: "/r/oom-11-1.pickle"},
		{Type: TypeOOM, PID: 10, TS: 7, Source: "excepthook"},
		{Type: TypeError, PID: 11, Where: "sample", Error: "KeyError: x"},
		{Type: TypeDisconnect, PID: 11},
	}
	var s Summary
	for _, m := range msgs {
		s.Add(m)
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"samples":3,"optimizer_steps":9,"user_steps":0,"peak_allocated_bytes":70,"peak_reserved_bytes":80,"peak_rss_bytes":300,` +
		`"num_alloc_retries":6,"num_ooms":1,"checkpoints":[` +
		`{"path":"/c/a.pt","bytes":1000,"seconds":0.5,"t":"1970-01-01T00:00:04Z","pid":10,"optimizer_steps":9},` +
		`{"path":"/c/b.pt","bytes":0,"seconds":0.1,"t":"1970-01-01T00:00:05Z","pid":10,"error":"OSError: disk full","optimizer_steps":0}],` +
		`"oom":{"pid":11,"t":"1970-01-01T00:00:06Z","source":"observer","device":0,"alloc_bytes":1073741824,"snapshot_path":"/r/oom-11-1.pickle","count":2},` +
		`"errors":["sample: KeyError: x"],"pids":[10,11]}`
	if string(b) != want {
		t.Errorf("got\n%s\nwant\n%s", b, want)
	}
	if lt, ok := s.LastCheckpoint(); !ok || lt != time.Unix(4, 0).UTC() {
		t.Errorf("LastCheckpoint = %v %v (a failed save does not count)", lt, ok)
	}

	var empty Summary
	b, _ = json.Marshal(empty)
	if string(b) != `{"samples":0,"optimizer_steps":0,"user_steps":0,"peak_allocated_bytes":null,"peak_reserved_bytes":null,"peak_rss_bytes":0,"num_alloc_retries":0,"num_ooms":0,"checkpoints":[],"oom":null,"pids":[]}` {
		t.Errorf("empty summary: %s", b)
	}
}

func TestTopAllocationSites(t *testing.T) {
	want := []Site{
		{File: "/home/user/model.py", Line: 63, Function: "forward", Bytes: 24 << 30, Blocks: 12},
		{File: "/home/user/train.py", Line: 41, Function: "build_model", Bytes: 20 << 30, Blocks: 20},
		{File: "/home/user/train.py", Line: 99, Function: "main", Bytes: 4 << 30, Blocks: 4},
		{File: "?", Bytes: 2 << 20, Blocks: 1},
	}
	cases := []struct {
		file string
		n    int
		want []Site
	}{
		{"snapshot_oom.pickle", 10, want},
		{"snapshot_oom.pickle", 2, want[:2]},
		// torch 1.13/2.0 layout: no stack for the frameless block either.
		{"snapshot_history_v1.pickle", 10, want},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			got, err := TopAllocationSites(testdata(t, tc.file), tc.n)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestTopAllocationSitesRejects(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name, body, want string
	}{
		// pickle.dumps of a dict holding os.system: a global, never resolved.
		{"global", "\x80\x04\x95\x22\x00\x00\x00\x00\x00\x00\x00}\x94\x8c\x08segments\x94\x8c\x05posix\x94\x8c\x06system\x94\x93\x94s.", "global posix.system"},
		{"not a dict", "\x80\x04K\x01.", "not a snapshot's dict"},
		{"no segments", "\x80\x04}\x94.", `no "segments"`},
		{"truncated", "\x80\x04}\x94\x8c\x08segm", "truncated"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_"))
			if err := os.WriteFile(p, []byte(tc.body), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := TopAllocationSites(p, 5)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
	if _, err := TopAllocationSites(filepath.Join(dir, "missing"), 5); err == nil {
		t.Error("missing file: no error")
	}
}
