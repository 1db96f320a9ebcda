package agent

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/store"
)

// TestAPIIndex: GET /api/v1/ lists every endpoint, and every one it lists
// is routed (a GET without path parameters answers 200; a mutation without
// the token 401, with it anything but "no such endpoint").
func TestAPIIndex(t *testing.T) {
	r := newRig(t, twoJobs, Config{})
	r.step(2)
	var idx struct{ Endpoints []Endpoint }
	for _, p := range []string{"/api/v1/", "/api/v1"} {
		code, body := r.do("GET", p, "", "")
		if code != 200 {
			t.Fatalf("GET %s: %d %s", p, code, body)
		}
		if err := json.Unmarshal([]byte(body), &idx); err != nil {
			t.Fatal(err)
		}
	}
	if len(idx.Endpoints) < 16 {
		t.Fatalf("the index lists %d endpoints", len(idx.Endpoints))
	}
	key := r.ag.Snapshot().Jobs[0].Key
	for _, e := range idx.Endpoints {
		if e.Description == "" {
			t.Errorf("%s %s has no description", e.Method, e.Path)
		}
		path := strings.NewReplacer("{key}", url.PathEscape(key), "{id}", "no-such-run").Replace(e.Path)
		switch {
		case e.Method == "GET" && path == e.Path:
			if code, body := r.do("GET", path, "", ""); code != 200 {
				t.Errorf("GET %s: %d %s", path, code, body)
			}
		case e.Method == "GET":
			if code, body := r.do("GET", path, "", ""); strings.Contains(body, "no such endpoint") || (code != 200 && code != 404) {
				t.Errorf("GET %s: %d %s", path, code, body)
			}
		default:
			if !e.Token {
				t.Errorf("%s %s changes state without the token", e.Method, e.Path)
			}
			if code, _ := r.do(e.Method, path, "", ""); code != 401 {
				t.Errorf("%s %s without the token: %d", e.Method, path, code)
			}
			if _, body := r.do(e.Method, path, r.token, "{}"); strings.Contains(body, "no such endpoint") {
				t.Errorf("%s %s is listed but not routed: %s", e.Method, path, body)
			}
		}
	}
	if _, body := r.do("GET", "/api/v1/nope", "", ""); !strings.Contains(body, "GET /api/v1/ lists them") {
		t.Errorf("an unknown endpoint's answer does not point to the index: %s", body)
	}
}

// TestTimelineGaps: a job seen for a minute, gone for four, back for a
// minute; the timeline's gap_s tells the one gap from the sampling steps,
// at full resolution and downsampled.
func TestTimelineGaps(t *testing.T) {
	r := newRig(t, twoJobs, Config{})
	ctx := context.Background()
	t0 := r.clk.Now().Add(-10 * time.Minute).Truncate(time.Minute)
	id, err := r.st.UpsertAgentJob(ctx, &store.AgentJob{Key: "gappy", Kind: "process", Name: "python3 eval.py",
		Info: json.RawMessage(`{"devices":[0],"limit_bytes":17179869184}`), FirstSeen: t0, LastSeen: t0.Add(6 * time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	for _, span := range [][2]int{{0, 60}, {300, 360}} {
		for s := span[0]; s <= span[1]; s++ {
			r.ag.tl.Add(id, Point{T: t0.Add(time.Duration(s) * time.Second).UnixMilli(), GPU: 1 << 30, RSS: 1 << 29, Alloc: -1, Reserved: -1})
		}
	}
	if err := r.ag.tl.Close(ctx); err != nil {
		t.Fatal(err)
	}
	r.step(1)
	for _, q := range []string{"range=15m", "range=15m&points=40"} {
		_, body := r.do("GET", "/api/v1/timelines?job=gappy&"+q, "", "")
		var d struct{ Timelines []Timeline }
		if err := json.Unmarshal([]byte(body), &d); err != nil || len(d.Timelines) != 1 {
			t.Fatalf("%s: %v %s", q, err, body)
		}
		tl := d.Timelines[0]
		if tl.StepS != 1 || tl.GapS < 5*tl.StepS || len(tl.Devices) != 1 {
			t.Errorf("%s: step %v s, gap %v s, devices %v", q, tl.StepS, tl.GapS, tl.Devices)
		}
		var gaps []float64
		for i := 1; i < len(tl.T); i++ {
			if dt := tl.T[i] - tl.T[i-1]; dt > tl.GapS {
				gaps = append(gaps, tl.T[i-1]-float64(t0.Unix()))
			}
		}
		if len(gaps) != 1 || gaps[0] > 60 {
			t.Errorf("%s (%d points, gap_s %v): gaps after %v s, want one, after the first minute", q, len(tl.T), tl.GapS, gaps)
		}
	}
}
