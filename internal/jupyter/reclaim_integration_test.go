package jupyter_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/testbin"
)

// TestIdleKernelThroughServer: a real kernel of a real jupyter-server that
// holds (simulated) GPU memory at 0% is flagged idle by `kernels` once
// Jupyter has called it idle for the window, and `serve --reclaim-idle`
// tells its owner and then shuts it down through that server.
func TestIdleKernelThroughServer(t *testing.T) {
	l := newLab(t)
	l.startServer()
	// a client's cell: Jupyter calls the kernel idle (not starting) after it
	id, k, pid := l.startKernel("idle.ipynb")
	dir := t.TempDir()
	scen := filepath.Join(dir, "idle.json")
	if err := os.WriteFile(scen, []byte(fmt.Sprintf(`{"name": "idle kernel", "duration": "1h",
	  "devices": [{"name": "Test GPU", "uuid": "GPU-test-0", "total": "80GiB"}],
	  "processes": [{"pid": %d, "device": 0, "memory": "12GiB", "sm_util": 0}]}`, pid)), 0o644); err != nil {
		t.Fatal(err)
	}

	// kernels: not idle under a window longer than the kernel has lived,
	// idle under one of 1 s once Jupyter has called it idle that long
	flagged := func(window string) (kernelEntry, bool) {
		r := l.vg("kernels", "--json", "--simulate", scen, "--runtime-dir", l.runtime, "--idle-window", window)
		var es []kernelEntry
		r.JSON(l.t, &es)
		for _, e := range es {
			if e.KernelID == id {
				return e, e.Idle
			}
		}
		t.Fatalf("kernels --json lacks kernel %s: %s", id, r.Stdout)
		return kernelEntry{}, false
	}
	if e, idle := flagged("24h"); idle || *e.GPUBytes != 12<<30 {
		t.Errorf("under a 24h window: idle %v, gpu_bytes %d (want not idle, 12 GiB)", idle, *e.GPUBytes)
	}
	var last kernelEntry
	testbin.WaitFor(t, 30*time.Second, "kernels to flag the idle kernel", func() bool {
		e, idle := flagged("1s")
		last = e
		if e.ExecutionState == "starting" {
			// a loaded server may not have taken the kernel's status yet
			k.run("x = 1")
		}
		return idle
	}, func() { t.Logf("last: %+v", last) })
	if last.ExecutionState != "idle" || *last.IdleS < 1 {
		t.Errorf("flagged idle with state %q idle_s %v", last.ExecutionState, *last.IdleS)
	}

	// serve --reclaim-idle: the owner's notice, then the shutdown
	stdout, serr := l.serve(l.bin, append(l.env(), "VRAMGUARD_HOME="+filepath.Join(dir, "agent")),
		"--listen", "127.0.0.1:0", "--json", "--simulate", scen, "--probe-socket", "none", "--idle-window", "1s", "--reclaim-idle", "2s")
	var start struct{ URL string }
	if err := json.NewDecoder(stdout).Decode(&start); err != nil || start.URL == "" {
		t.Fatalf("serve's startup line: %v (url %q)", err, start.URL)
	}
	testbin.WaitFor(t, 60*time.Second, "the server to no longer list the reclaimed kernel", func() bool { return !l.listed(id) })
	resp, err := http.Get(start.URL + "api/v1/notices")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var notices struct {
		Notices []struct{ Text string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&notices); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("vramguard: shutting down kernel %s (", id[:8])
	var found bool
	for _, n := range notices.Notices {
		if strings.HasPrefix(n.Text, want) && strings.Contains(n.Text, fmt.Sprintf("pid %d): it has held 12 GiB on GPU 0 unused for", pid)) &&
			strings.HasSuffix(n.Text, "(serve --reclaim-idle 2s)") {
			found = true
		}
	}
	if !found {
		t.Errorf("no notice to the owner saying kernel %s is shut down: %+v", id, notices.Notices)
	}
	if strings.Contains(serr.String(), "reclaim idle kernel") {
		t.Errorf("the reclaim failed: %s", serr.String())
	}
}
