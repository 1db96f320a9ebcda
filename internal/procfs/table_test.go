package procfs

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestTableScan: a scan reads the stat of the processes whose place in the
// tree may have changed and keeps the last reading of the others (children
// of init, and children of a parent it read living), counted by Fresh; a
// parent that became a zombie, or whose PID a new process took, has its
// children read again, so their PPID is never stale.
func TestTableScan(t *testing.T) {
	root := t.TempDir()
	proc := filepath.Join(root, "proc")
	write := func(dir string, pid int, state string, ppid, start, rss int) {
		t.Helper()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		line := fmt.Sprintf("%d (p%d) %s %d %d %d 0 -1 0 0 0 0 0 5 5 0 0 20 0 1 0 %d 0 %d 0", pid, pid, state, ppid, pid, pid, start, rss)
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(line), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	set := func(pid int, state string, ppid, start, rss int) {
		write(filepath.Join(proc, fmt.Sprint(pid)), pid, state, ppid, start, rss)
	}
	// init, a daemon under it, and a chain of descendants
	tree := map[int]int{1: 0, 100: 1, 200: 100, 300: 200, 400: 300, 700: 400}
	for pid, ppid := range tree {
		set(pid, "S", ppid, pid, 10)
	}
	tab := NewTable(FS{Root: root})
	defer tab.Close()
	scan := func() (map[int]Proc, []int) {
		t.Helper()
		all, err := tab.Scan(nil)
		if err != nil {
			t.Fatal(err)
		}
		got := map[int]Proc{}
		var fresh []int
		for _, p := range all {
			got[p.PID] = p
			if tab.Fresh(p.PID) {
				fresh = append(fresh, p.PID)
			}
		}
		return got, fresh
	}
	if _, fresh := scan(); !slices.Equal(fresh, []int{1, 100, 200, 300, 400, 700}) {
		t.Fatalf("first scan read %v, want every process", fresh)
	}

	// every RSS changes; 200 is read (its parent, under init, was not),
	// 300 not (its parent 200 was read living), 400 is, 700 not
	for pid, ppid := range tree {
		set(pid, "S", ppid, pid, 20)
	}
	got, fresh := scan()
	if !slices.Equal(fresh, []int{200, 400}) {
		t.Errorf("second scan read %v, want [200 400]", fresh)
	}
	if got[300].RSSBytes != 10*PageSize || got[200].RSSBytes != 20*PageSize {
		t.Errorf("RSS of 200 %d (read), of 300 %d (kept), want 20 and 10 pages", got[200].RSSBytes/PageSize, got[300].RSSBytes/PageSize)
	}
	if p, err := tab.Restat(300); err != nil || p.RSSBytes != 20*PageSize {
		t.Errorf("Restat(300) = %+v, %v: want its RSS now", p, err)
	}

	// 200 exits (a zombie until 100 reaps it): 300 goes to init
	set(200, "Z", 100, 200, 0)
	set(300, "S", 1, 300, 20)
	got, _ = scan()
	if got[300].PPID != 1 {
		t.Errorf("300's parent %d after 200 exited, want init", got[300].PPID)
	}

	// 400 exits and is reaped (700 goes to init), and a new process takes
	// PID 400: a new /proc entry, made before the old one goes so that
	// its inode differs
	set(700, "S", 1, 700, 20)
	fresh400 := filepath.Join(proc, "new400")
	write(fresh400, 400, "S", 100, 9999, 5)
	if err := os.RemoveAll(filepath.Join(proc, "400")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(fresh400, filepath.Join(proc, "400")); err != nil {
		t.Fatal(err)
	}
	got, _ = scan()
	if got[700].PPID != 1 || got[400].StartTicks != 9999 {
		t.Errorf("700's parent %d, 400's start %d: want init, and the new 400's 9999", got[700].PPID, got[400].StartTicks)
	}
}
