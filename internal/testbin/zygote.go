package testbin

import (
	"bufio"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
)

//go:embed zygote.py
var zygoteScript string

// Zygote runs Python programs as `python -c SCRIPT ARGS...` runs them, each
// in a process of its own, but forked from one interpreter that imported
// the preloaded modules once: importing torch is 2 s of CPU, and a test
// package that asks torch (numpy, zstandard) what it does with a dozen
// files paid it a dozen times. Each program gets its own stdin, stdout,
// stderr, working directory, sys.argv and __main__, and its exit status as
// Python gives it; what one program changes (a payload that patches a
// module) dies with its process.
//
// It is for tests that use a library as an oracle. A test of the probe, or
// of a job vramguard supervises, must see a real interpreter start, and
// runs Python itself.
//
// The zygote starts on the first Run and ends with the test process (its
// request pipe closes). Runs may be concurrent.
type Zygote struct {
	preload []string

	once  sync.Once
	err   error
	req   *os.File
	mu    sync.Mutex // req, next, waits
	next  int
	waits map[int]chan zygoteReply
}

type zygoteRequest struct {
	ID      int      `json:"id"`
	Script  string   `json:"script"`
	Args    []string `json:"args"`
	Stdin   string   `json:"stdin"`
	Stdout  string   `json:"stdout"`
	Stderr  string   `json:"stderr"`
	Cwd     string   `json:"cwd,omitempty"`
	Timeout int      `json:"timeout"`
}

type zygoteReply struct {
	ID     int `json:"id"`
	PID    int `json:"pid"`
	Status int `json:"status"`
}

// NewZygote returns a zygote that imports the named modules before it
// forks (nothing is started yet).
func NewZygote(preload ...string) *Zygote {
	return &Zygote{preload: preload, waits: map[int]chan zygoteReply{}}
}

func (z *Zygote) start() error {
	req, reqW, err := os.Pipe()
	if err != nil {
		return err
	}
	replyR, reply, err := os.Pipe()
	if err != nil {
		return err
	}
	cmd := exec.Command(Python(), append([]string{"-c", zygoteScript}, z.preload...)...)
	cmd.ExtraFiles = []*os.File{req, reply} // fds 3 and 4
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the Python zygote: %w", err)
	}
	req.Close()
	reply.Close()
	z.req = reqW
	go func() {
		sc := bufio.NewScanner(replyR)
		for sc.Scan() {
			var r zygoteReply
			if json.Unmarshal(sc.Bytes(), &r) != nil {
				continue
			}
			z.mu.Lock()
			ch := z.waits[r.ID]
			delete(z.waits, r.ID)
			z.mu.Unlock()
			if ch != nil {
				ch <- r
			}
		}
		// the zygote died: fail every waiting run
		cmd.Wait()
		z.mu.Lock()
		for id, ch := range z.waits {
			delete(z.waits, id)
			close(ch)
		}
		z.err = fmt.Errorf("the Python zygote (%s) ended: %v", Python(), cmd.ProcessState)
		z.mu.Unlock()
	}()
	return nil
}

// Run runs script with args and stdin in a fork of the zygote, to its end
// or Timeout (SIGALRM ends it), and returns what it printed and its exit
// status (Code -1 for a signal). It fails t when the zygote cannot run it.
func (z *Zygote) Run(t testing.TB, stdin, script string, args ...string) Result {
	t.Helper()
	z.once.Do(func() {
		if err := z.start(); err != nil {
			z.mu.Lock()
			z.err = err
			z.mu.Unlock()
		}
	})
	dir := t.TempDir()
	r := zygoteRequest{Script: script, Args: args, Timeout: int(Timeout.Seconds()),
		Stdin: filepath.Join(dir, "stdin"), Stdout: filepath.Join(dir, "stdout"), Stderr: filepath.Join(dir, "stderr")}
	if r.Args == nil {
		r.Args = []string{}
	}
	if err := os.WriteFile(r.Stdin, []byte(stdin), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{r.Stdout, r.Stderr} {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if wd, err := os.Getwd(); err == nil {
		r.Cwd = wd
	}
	ch := make(chan zygoteReply, 1)
	z.mu.Lock()
	if z.err != nil {
		z.mu.Unlock()
		t.Fatal(z.err)
	}
	z.next++
	r.ID = z.next
	z.waits[r.ID] = ch
	line, _ := json.Marshal(r)
	_, err := z.req.Write(append(line, '\n'))
	z.mu.Unlock()
	if err != nil {
		t.Fatalf("ask the Python zygote: %v", err)
	}
	rep, ok := <-ch
	if !ok {
		z.mu.Lock()
		err := z.err
		z.mu.Unlock()
		t.Fatal(err)
	}
	so, _ := os.ReadFile(r.Stdout)
	se, _ := os.ReadFile(r.Stderr)
	res := Result{Args: append([]string{Python(), "-c", script}, args...), Stdout: string(so), Stderr: string(se), PID: rep.PID}
	ws := syscall.WaitStatus(rep.Status)
	switch {
	case ws.Exited():
		res.Code = ws.ExitStatus()
	default:
		res.Code = -1
	}
	return res
}
