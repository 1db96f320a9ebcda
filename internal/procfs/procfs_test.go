package procfs

import (
	"errors"
	iofs "io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func TestParseStat(t *testing.T) {
	PageSize = 4096
	tests := []struct {
		name string
		in   string
		want Proc
		bad  bool
	}{
		{
			name: "plain",
			in:   "1234 (python3) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 98765 1000000 2560 18446744073709551615",
			want: Proc{PID: 1234, PPID: 1, PGID: 1234, SID: 1234, Comm: "python3", State: "S", CPUTicks: 300, StartTicks: 98765, RSSBytes: 2560 * 4096},
		},
		{
			name: "comm with spaces and parens",
			in:   "77 (pt_main (thread)) R 5 6 7 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 42 0 10 0",
			want: Proc{PID: 77, PPID: 5, PGID: 6, SID: 7, Comm: "pt_main (thread)", State: "R", CPUTicks: 3, StartTicks: 42, RSSBytes: 40960},
		},
		{name: "truncated", in: "1 (x) S 1 2", bad: true},
		{name: "no comm", in: "1 x S", bad: true},
		{name: "garbage field", in: "1 (x) S a 1 1 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 42 0 10 0", bad: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseStat([]byte(tt.in))
			if tt.bad {
				if err == nil {
					t.Fatalf("want error, got %+v", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestTree(t *testing.T) {
	procs := []Proc{{PID: 1}, {PID: 10, PPID: 1}, {PID: 11, PPID: 10}, {PID: 12, PPID: 10}, {PID: 13, PPID: 11}, {PID: 20, PPID: 1}}
	var got []int
	for _, p := range Tree(procs, 10) {
		got = append(got, p.PID)
	}
	if want := []int{10, 11, 12, 13}; !reflect.DeepEqual(got, want) {
		t.Errorf("Tree = %v, want %v", got, want)
	}
	if Tree(procs, 99) != nil {
		t.Error("Tree of a missing root should be nil")
	}
}

func TestParseStatusAndCgroups(t *testing.T) {
	s := ParseStatus([]byte("Name:\tpython\nUid:\t1000\t1000\t1000\t1000\nNSpid:\t4242\t17\t1\nVmRSS:\t  2048 kB\n"))
	if s.Name != "python" || s.UID != 1000 || !reflect.DeepEqual(s.NSpid, []int{4242, 17, 1}) || s.VmRSS != 2048*1024 {
		t.Errorf("ParseStatus = %+v", s)
	}
	cg := ParseCgroups([]byte("12:memory:/docker/abc\n0::/system.slice/x.scope\nbad line\n"))
	want := []CgroupEntry{{ID: 12, Controllers: []string{"memory"}, Path: "/docker/abc"}, {ID: 0, Path: "/system.slice/x.scope"}}
	if !reflect.DeepEqual(cg, want) {
		t.Errorf("ParseCgroups = %+v", cg)
	}
}

// TestLive reads this test process from the real /proc.
func TestLive(t *testing.T) {
	var fs FS
	p, err := fs.Proc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if p.PID != os.Getpid() || p.PPID != os.Getppid() || p.RSSBytes == 0 {
		t.Errorf("live proc = %+v", p)
	}
	all, err := fs.All()
	if err != nil {
		t.Fatal(err)
	}
	if len(Tree(all, os.Getpid())) == 0 {
		t.Error("own process missing from Tree")
	}
	if m, err := fs.MemInfo(); err != nil || m.Total == 0 {
		t.Errorf("MemInfo = %+v, %v", m, err)
	}
}

// TestRootedFixture reads a fixture tree through FS.Root.
func TestRootedFixture(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "proc", "4242")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "stat"), []byte("4242 (train) S 1 4242 4242 0 -1 0 0 0 0 0 5 5 0 0 20 0 1 0 9 0 3 0"), 0o644)
	os.WriteFile(filepath.Join(dir, "cmdline"), []byte("python\x00train.py\x00"), 0o644)
	fs := FS{Root: root}
	pids, err := fs.PIDs()
	if err != nil || !reflect.DeepEqual(pids, []int{4242}) {
		t.Fatalf("PIDs = %v, %v", pids, err)
	}
	argv, err := fs.Cmdline(4242)
	if err != nil || !reflect.DeepEqual(argv, []string{"python", "train.py"}) {
		t.Errorf("Cmdline = %q, %v", argv, err)
	}
	all, err := fs.All()
	if err != nil || len(all) != 1 || all[0].PID != 4242 || all[0].Comm != "train" || all[0].StartTicks != 9 {
		t.Errorf("All = %+v, %v", all, err)
	}
	// A command line longer than the pooled buffer is read whole.
	long := strings.Repeat("x", 10000)
	os.WriteFile(filepath.Join(dir, "cmdline"), []byte("python\x00"+long+"\x00"), 0o644)
	argv, err = fs.Cmdline(4242)
	if err != nil || len(argv) != 2 || argv[1] != long {
		t.Errorf("long Cmdline: %d args, %v", len(argv), err)
	}
	if _, err := fs.Status(4243); !errors.Is(err, iofs.ErrNotExist) {
		t.Errorf("Status of a missing process: %v, want not exist", err)
	}
}

// TestParseAllocs: parsing stat and status allocates nothing but the NSpid
// list and the name (command names are interned).
func TestParseAllocs(t *testing.T) {
	stat := []byte("1234 (python3) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 98765 1000000 2560 18446744073709551615")
	if n := testing.AllocsPerRun(100, func() { ParseStat(stat) }); n != 0 {
		t.Errorf("ParseStat: %v allocations", n)
	}
	status := []byte("Name:\tpython\nUid:\t1000\t1000\t1000\t1000\nNSpid:\t4242\t17\t1\nVmRSS:\t  2048 kB\n")
	if n := testing.AllocsPerRun(100, func() { ParseStatus(status) }); n > 2 {
		t.Errorf("ParseStatus: %v allocations", n)
	}
}

// TestKeptStatFiles: All keeps the live stat files open between calls, sees
// a process that exits leave, and closes what it kept for it.
func TestKeptStatFiles(t *testing.T) {
	var fs FS
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	has := func(all []Proc) bool {
		for _, p := range all {
			if p.PID == pid {
				return true
			}
		}
		return false
	}
	// kept reports whether this process holds /proc/<pid>/stat open.
	kept := func() bool {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		want := "/proc/" + strconv.Itoa(pid) + "/stat"
		for _, e := range ents {
			if l, _ := os.Readlink("/proc/self/fd/" + e.Name()); l == want {
				return true
			}
		}
		return false
	}
	for i := 0; i < 2; i++ {
		all, err := fs.All()
		if err != nil || !has(all) {
			t.Fatalf("pass %d: sleep %d missing (%v)", i, pid, err)
		}
	}
	if !kept() {
		t.Errorf("%d's stat is not kept open", pid)
	}
	cmd.Process.Kill()
	cmd.Wait()
	all, err := fs.All()
	if err != nil || has(all) {
		t.Fatalf("sleep %d still listed after exiting (%v)", pid, err)
	}
	if kept() {
		t.Errorf("%d's stat still open after it left", pid)
	}
	CloseStatFiles()
	all, err = fs.All()
	if err != nil || len(all) == 0 {
		t.Fatalf("All after CloseStatFiles: %d, %v", len(all), err)
	}
}
