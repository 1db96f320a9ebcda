package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/vramguard/vramguard/internal/testbin"
)

func TestMemoryOf(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  Memory
	}{
		{
			name: "v1 with limit and an OOM kill",
			files: map[string]string{
				"proc/42/cgroup": "12:pids:/docker/abc\n4:memory:/docker/abc\n0::/\n",
				"sys/fs/cgroup/memory/docker/abc/memory.usage_in_bytes":     "1048576\n",
				"sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes":     "2147483648\n",
				"sys/fs/cgroup/memory/docker/abc/memory.max_usage_in_bytes": "2000000000\n",
				"sys/fs/cgroup/memory/docker/abc/memory.oom_control":        "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n",
			},
			want: Memory{Version: 1, Usage: 1048576, Limit: 2 << 30, Peak: 2000000000, OOMKills: 3},
		},
		{
			name: "v1 unlimited",
			files: map[string]string{
				"proc/42/cgroup": "4:memory:/\n",
				"sys/fs/cgroup/memory/memory.usage_in_bytes": "5\n",
				"sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n",
			},
			want: Memory{Version: 1, Usage: 5},
		},
		{
			name: "v2",
			files: map[string]string{
				"proc/42/cgroup": "0::/kubepods.slice/pod1/cri-containerd-x.scope\n",
				"sys/fs/cgroup/kubepods.slice/pod1/cri-containerd-x.scope/memory.current": "4096\n",
				"sys/fs/cgroup/kubepods.slice/pod1/cri-containerd-x.scope/memory.max":     "max\n",
				"sys/fs/cgroup/kubepods.slice/pod1/cri-containerd-x.scope/memory.peak":    "8192\n",
				"sys/fs/cgroup/kubepods.slice/pod1/cri-containerd-x.scope/memory.events":  "low 0\nhigh 0\nmax 2\noom 1\noom_kill 1\n",
			},
			want: Memory{Version: 2, Usage: 4096, Peak: 8192, OOMKills: 1},
		},
		{
			name: "hybrid: memory on v1 wins over the unified mount",
			files: map[string]string{
				"proc/42/cgroup": "4:memory:/job\n0::/job\n",
				"sys/fs/cgroup/memory/job/memory.usage_in_bytes": "7\n",
				"sys/fs/cgroup/memory/job/memory.limit_in_bytes": "100\n",
				"sys/fs/cgroup/unified/job/memory.current":       "999\n",
			},
			want: Memory{Version: 1, Usage: 7, Limit: 100},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := testbin.WriteTree(t, tt.files)
			got, err := Reader{Root: root}.MemoryOf(42)
			if err != nil {
				t.Fatal(err)
			}
			got.Path = ""
			if got != tt.want {
				t.Errorf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
	if _, err := (Reader{Root: testbin.WriteTree(t, map[string]string{"proc/42/cgroup": "1:cpu:/\n"})}).MemoryOf(42); err == nil {
		t.Error("no memory controller: want an error")
	}
}

// TestCreateAndKill runs on the live system: it needs a cgroup vramguard
// may create (root, or a delegated v2 subtree), as `run --memory-limit` does.
func TestCreateAndKill(t *testing.T) {
	g, err := Create("vramguard-test-"+filepath.Base(t.TempDir()), 64<<20)
	if err != nil {
		t.Fatalf("no memory cgroup here: %v", err)
	}
	if g.Dir == "" {
		// A systemd scope: the job is wrapped, there is no directory yet.
		if len(g.Wrap) == 0 {
			t.Fatal("a group with neither a directory nor a wrapper")
		}
		return
	}
	defer g.Remove()
	m, err := ReadMemory(g.Dir, g.Version)
	if err != nil || m.Limit != 64<<20 {
		t.Fatalf("limit = %+v, %v", m, err)
	}
	if err := g.Kill(0); err != nil {
		t.Errorf("kill an empty group: %v", err)
	}
}

// TestCreateIsUniquePerCall: two runs supervised in one process (a test
// binary's parallel tests) ask for the same name at once. Each must get a
// directory of its own, never one the other created and may be removing:
// with names from the process id, one run removed the directory while the
// other wrote its limit ("memory.limit_in_bytes: no such device"). Each
// caller sets a limit of its own and reads it back, so two callers sharing
// a directory see each other's limit.
func TestCreateIsUniquePerCall(t *testing.T) {
	const callers, rounds = 16, 5
	var wg sync.WaitGroup
	errs := make(chan error, callers*rounds*3)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			limit := uint64(64+i) << 20
			for range rounds {
				g, err := Create("vramguard-test-unique", limit)
				if err != nil {
					errs <- err
					return
				}
				if g.Dir == "" {
					errs <- fmt.Errorf("a systemd scope, not a directory: %+v", g)
					return
				}
				if !strings.HasPrefix(filepath.Base(g.Dir), "vramguard-test-unique-") {
					errs <- fmt.Errorf("%s: not named after the caller's name", g.Dir)
				}
				m, err := ReadMemory(g.Dir, g.Version)
				if err != nil || m.Limit != limit {
					errs <- fmt.Errorf("%s: limit %d, %v; this caller set %d (another call shares or removed it)", g.Dir, m.Limit, err, limit)
				}
				if err := g.Remove(); err != nil {
					errs <- err
				}
				if _, err := os.Stat(g.Dir); !errors.Is(err, os.ErrNotExist) {
					errs <- fmt.Errorf("%s left behind after Remove: %v", g.Dir, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
