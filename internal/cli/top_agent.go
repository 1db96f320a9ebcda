package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/vramguard/vramguard/internal/agent"
	"github.com/vramguard/vramguard/internal/attrib"
	"github.com/vramguard/vramguard/internal/probe"
	"github.com/vramguard/vramguard/internal/sampler"
	"github.com/vramguard/vramguard/internal/timeline"
)

// readingSource is where top's screen gets its readings: its own sampler,
// or a machine-wide agent (agentSource).
type readingSource interface {
	Next(ctx context.Context, seq uint64) (sampler.Reading, error)
	History(key string) []timeline.Point
}

// agentSocket is the API socket of the machine-wide agent top should ask
// (--agent): "" when top samples the machine itself.
func agentSocket(spec string, getenv func(string) string) (string, error) {
	switch spec {
	case "none":
		return "", nil
	case "", "auto":
		p := probe.SharedAPISocket(getenv)
		if st, err := os.Stat(p); err == nil && st.Mode()&os.ModeSocket != 0 {
			return p, nil
		}
		return "", nil
	}
	st, err := os.Stat(spec)
	if err != nil || st.Mode()&os.ModeSocket == 0 {
		return "", Usagef("--agent %s: not a socket (want auto, none or the agent's API socket)", spec)
	}
	return spec, nil
}

// agentClient is an HTTP client for the agent's Unix API socket: the agent
// answers as the user the kernel says this process runs as.
func agentClient(sock string, timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
}

// getAgent decodes GET path from the agent at sock into out.
func getAgent(ctx context.Context, c *http.Client, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://agent"+path, nil)
	if err != nil {
		return err
	}
	return doAgent(c, req, out)
}

// postAgent POSTs to path on the agent and wants a 200 answer (its JSON
// body is not needed).
func postAgent(ctx context.Context, c *http.Client, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://agent"+path, nil)
	if err != nil {
		return err
	}
	var ignored map[string]any
	return doAgent(c, req, &ignored)
}

// doAgent sends req and decodes a 200 answer into out; any other is an
// error carrying the agent's message.
func doAgent(c *http.Client, req *http.Request, out any) error {
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error string }
		_ = json.NewDecoder(resp.Body).Decode(&e)
		return fmt.Errorf("agent: %s: %s", resp.Status, e.Error)
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(out)
}

// agentSource reads the machine from the agent, once per interval, and
// keeps each job's GPU memory points for the HISTORY column.
type agentSource struct {
	c        *http.Client
	interval time.Duration
	history  time.Duration

	mu   sync.Mutex
	seq  uint64
	last time.Time
	hist map[string][]timeline.Point
}

func newAgentSource(sock string, interval time.Duration) *agentSource {
	return &agentSource{c: agentClient(sock, 10*time.Second), interval: interval, history: 10 * time.Minute, hist: map[string][]timeline.Point{}}
}

// Refresh asks the agent now.
func (s *agentSource) Refresh(ctx context.Context) (sampler.Reading, error) {
	s.mu.Lock()
	s.last = time.Now() // a failed ask waits its interval too
	s.mu.Unlock()
	var m agent.Machine
	if err := getAgent(ctx, s.c, "/api/v1/machine", &m); err != nil {
		return sampler.Reading{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	r := machineReading(m, s.seq)
	cut := m.Time.Add(-s.history).UnixMilli()
	for _, j := range r.Attrib.Jobs {
		h := append(s.hist[j.Key], timeline.Point{T: m.Time.UnixMilli(), GPU: int64(j.GPUBytes), RSS: int64(j.RSSBytes), Alloc: -1, Reserved: -1, Util: int64(j.SMUtilPercent)})
		for len(h) > 0 && h[0].T < cut {
			h = h[1:]
		}
		s.hist[j.Key] = h
	}
	return r, nil
}

// Next implements readingSource: the agent's next reading, one interval
// after the last.
func (s *agentSource) Next(ctx context.Context, seq uint64) (sampler.Reading, error) {
	s.mu.Lock()
	wait := time.Until(s.last.Add(s.interval))
	if seq == 0 {
		wait = 0
	}
	s.mu.Unlock()
	if wait > 0 {
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return sampler.Reading{}, ctx.Err()
		}
	}
	return s.Refresh(ctx)
}

// History implements readingSource.
func (s *agentSource) History(key string) []timeline.Point {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]timeline.Point(nil), s.hist[key]...)
}

// machineReading is the agent's machine view as a sampler reading.
func machineReading(m agent.Machine, seq uint64) sampler.Reading {
	r := sampler.Reading{Seq: seq, Time: m.Time, ProcessTime: m.Time, Backend: m.Backend, Devices: m.Devices, Dropped: m.Dropped,
		Attrib: attrib.Result{Jobs: m.Jobs, Vanished: m.Vanished, VanishedBytes: m.VanishedBytes, Scanned: m.Scanned},
		Judged: map[string]*sampler.Judgement{}}
	r.Devices = emptyIfNil(r.Devices)
	r.Attrib.Jobs = emptyIfNil(r.Attrib.Jobs)
	for k, v := range m.Verdicts {
		r.Judged[k] = &sampler.Judgement{Summary: v}
	}
	return r
}
