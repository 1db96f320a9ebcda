package testbin

import (
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// A program run by the zygote prints and ends as `python -c` runs it.
func TestZygoteIsPythonC(t *testing.T) {
	z := NewZygote("json")
	tests := []struct {
		name, script, stdin string
		args                []string
	}{
		{"argv and stdin", "import sys\nprint(sys.argv)\nprint(sys.stdin.read().upper(), end='')\nprint('err', file=sys.stderr)", "a\nb\n", []string{"x", "y z"}},
		{"exit status", "import sys\nprint('out')\nsys.exit(7)", "", nil},
		{"exit message", "import sys\nsys.exit('bad input')", "", nil},
		{"uncaught exception", "def f():\n    raise ValueError('at 42')\nf()", "", nil},
		{"os._exit", "import os, sys\nsys.stdout.flush()\nos._exit(3)", "", nil},
		{"killed", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", "", nil},
		{"__main__ is fresh", "print(__name__, sorted(k for k in globals() if not k.startswith('__')))", "", nil},
		{"cwd", "import os\nprint(os.getcwd())", "", nil},
		{"atexit runs", "import atexit\natexit.register(lambda: print('bye'))\nprint('hi')", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(Python(), append([]string{"-c", tt.script}, tt.args...)...)
			cmd.Stdin = strings.NewReader(tt.stdin)
			want := Run(t, cmd)
			got := z.Run(t, tt.stdin, tt.script, tt.args...)
			if got.Code != want.Code || got.Stdout != want.Stdout || got.Stderr != want.Stderr {
				t.Errorf("zygote: exit %d\nstdout %q\nstderr %q\npython -c: exit %d\nstdout %q\nstderr %q",
					got.Code, got.Stdout, got.Stderr, want.Code, want.Stdout, want.Stderr)
			}
		})
	}
}

// What one program changes in a preloaded module dies with its process, and
// programs run at once.
func TestZygoteIsolatesAndRunsAtOnce(t *testing.T) {
	z := NewZygote("json")
	patch := z.Run(t, "", "import json\njson.dumps = None\nprint(json.dumps)")
	if patch.Stdout != "None\n" {
		t.Fatalf("patch: %+v", patch)
	}
	if r := z.Run(t, "", "import json\nprint(json.dumps([1]))"); r.Stdout != "[1]\n" {
		t.Errorf("the next program sees the patch: %+v", r)
	}
	var wg sync.WaitGroup
	ends := make([]time.Time, 2)
	for i, d := range []string{"1.5", "0"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r := z.Run(t, "", "import time, sys\ntime.sleep(float(sys.argv[1]))", d); r.Code != 0 {
				t.Errorf("sleep %s: %+v", d, r)
			}
			ends[i] = time.Now()
		}()
	}
	wg.Wait()
	if !ends[1].Before(ends[0]) {
		t.Errorf("the quick program ended after the slow one: the zygote ran them one at a time")
	}
}
