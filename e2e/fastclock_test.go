package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/cli"
	"github.com/vramguard/vramguard/internal/testbin"
)

// clockRate is how much faster than the wall clock a fastRun's clock runs,
// at most: at 20, the fastest sampling `run` allows (50 ms) and the
// probe's fastest rate (20 Hz) are one reading a second of the run's
// clock, as a run at the defaults takes them, so the detector sees the
// series it sees in a real run of twenty times the length. A run at rate r
// samples every 1/r s (--sample-interval, --probe-hz): fewer readings of
// /proc a second cost less CPU where the test can wait longer.
const clockRate = 20

// fastRun is `vramguard run` supervised inside this test process with the
// command's clock (cli.Factory.Now) running clockRate times faster than the
// wall clock. The supervisor, its sampler, the probe's hook and the monitor
// read time only through that clock, so a job watched for minutes of its
// clock takes seconds of the test's: the same code as the binary's run,
// driven through its time-injected interface, not a shorter default. The
// job itself runs at wall speed; what it scripts against time (a leak's
// rate) it scales by the rate it is given.
type fastRun struct {
	t    *testing.T
	errb *testbin.Buffer
	done chan int
	code int
	once sync.Once
}

// fastClock is a clock that starts at the wall clock's now and runs rate
// times faster.
func fastClock(rate float64) func() time.Time {
	t0 := time.Now()
	return func() time.Time { return t0.Add(time.Duration(float64(time.Since(t0)) * rate)) }
}

// runFast starts `vramguard run args...` in-process with e's state
// directory, on a clock rate times the wall clock's, sampling once a second
// of that clock. The run's shim is this test binary (TestMain runs it).
func (e *env) runFast(rate float64, args ...string) *fastRun {
	e.t.Helper()
	r := &fastRun{t: e.t, errb: &testbin.Buffer{}, done: make(chan int, 1)}
	f := &cli.Factory{
		IO:  cli.IOStreams{In: strings.NewReader(""), Out: r.errb, ErrOut: r.errb},
		Now: fastClock(rate),
		Getenv: func(k string) string {
			if k == "VRAMGUARD_HOME" {
				return e.home
			}
			return os.Getenv(k)
		},
	}
	hz := fmt.Sprint(rate)
	args = append([]string{"run", "--sample-interval", fmt.Sprintf("%gms", 1000/rate), "--probe-hz", hz}, args...)
	go func() { r.done <- cli.Execute(context.Background(), f, args) }()
	return r
}

// wait returns the run's exit code, failing the test after d.
func (r *fastRun) wait(d time.Duration) int {
	r.t.Helper()
	r.once.Do(func() {
		select {
		case r.code = <-r.done:
		case <-time.After(d):
			r.t.Fatalf("in-process run still running after %s:\n%s", d, r.errb)
		}
	})
	return r.code
}

// exited reports whether the run has ended, without waiting.
func (r *fastRun) exited() bool {
	select {
	case c := <-r.done:
		r.once.Do(func() { r.code = c })
		return true
	default:
		return false
	}
}

// stopFile is Python that ends the job (exit 0) once path exists: in-process
// runs share this process's signals, so a test ends their jobs this way
// rather than with `vramguard stop`.
func stopFile(path string) string {
	return fmt.Sprintf("import os as _os\n_stop = %q\ndef stopped():\n    return _os.path.exists(_stop)\n", path)
}
