package agent

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/attrib"
	"github.com/vramguard/vramguard/internal/gpu/sim"
	"github.com/vramguard/vramguard/internal/procfs"
	"github.com/vramguard/vramguard/internal/sampler"
	"github.com/vramguard/vramguard/internal/store"
	"github.com/vramguard/vramguard/internal/testbin"
)

// rig is an agent playing a scenario against a fake clock; step takes one
// sample per call, as the sampler's loop would once a second.
type rig struct {
	t     testing.TB
	clk   *testbin.Clock
	smp   *sampler.Sampler
	ag    *Agent
	st    *store.Store
	srv   *httptest.Server
	token string
	runs  *rigRuns // which PIDs attribution takes for supervised runs
	gpus  *sim.Backend
}

// rigRuns is the attributor's run hints in a rig: none until a test sets h.
type rigRuns struct {
	mu sync.Mutex
	h  attrib.OwnerHints
}

func (r *rigRuns) RunForPID(pid int) (string, string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.h == nil {
		return "", "", false
	}
	return r.h.RunForPID(pid)
}

func (r *rigRuns) set(h attrib.OwnerHints) {
	r.mu.Lock()
	r.h = h
	r.mu.Unlock()
}

// runOf plays the run store's hints: pid is the root of run id, name.
type runOf struct {
	pid      int
	id, name string
}

func (r runOf) RunForPID(pid int) (string, string, bool) {
	if pid == r.pid {
		return r.id, r.name, true
	}
	return "", "", false
}

func newRig(t testing.TB, scenario string, cfg Config) *rig {
	t.Helper()
	return newRigPods(t, scenario, cfg, nil)
}

// newRigPods is newRig with the attributor naming pods from pods.
func newRigPods(t testing.TB, scenario string, cfg Config, pods *attrib.PodIndex) *rig {
	t.Helper()
	return newRigEnv(t, scenario, cfg, pods, func(string) string { return "" })
}

// newRigEnv is newRigPods with the scenario's "$NAME" PIDs read from getenv
// (real processes a test started).
func newRigEnv(t testing.TB, scenario string, cfg Config, pods *attrib.PodIndex, getenv func(string) string) *rig {
	t.Helper()
	sc, err := sim.Parse([]byte(scenario), getenv)
	if err != nil {
		t.Fatal(err)
	}
	clk := testbin.NewClock(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))
	b := sim.New(sc, sim.WithClock(clk.Now))
	host := b.Host(procfs.FS{})
	reg := NewProbeRegistry()
	reg.now = clk.Now
	runs := &rigRuns{}
	smp, err := sampler.New(sampler.Config{Backend: b, Attributor: &attrib.Attributor{Src: host, Hints: runs, Pods: pods}, Probes: reg, Now: clk.Now, Environ: procfs.FS{}.Environ})
	if err != nil {
		t.Fatal(err)
	}
	st := openStore(t)
	cfg.Sampler, cfg.Store, cfg.Registry, cfg.Now, cfg.Simulated, cfg.Version = smp, st, reg, clk.Now, host.Simulated, "test"
	ag, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, clk: clk, smp: smp, ag: ag, st: st, token: "s3cret", runs: runs, gpus: b}
	r.srv = httptest.NewServer(ag.Handler(r.token))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *rig) step(n int) {
	r.t.Helper()
	for range n {
		s, err := r.smp.Refresh(context.Background())
		if err != nil {
			r.t.Fatal(err)
		}
		r.ag.Ingest(context.Background(), s)
		r.clk.Add(time.Second)
	}
}

func (r *rig) do(method, path, token, body string) (int, string) {
	r.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = stringsReader(body)
	}
	req, err := http.NewRequest(method, r.srv.URL+path, rd)
	if err != nil {
		r.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func discardLog() *slog.Logger { return slog.New(slog.DiscardHandler) }
