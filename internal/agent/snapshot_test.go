package agent

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/snapshot"
	"github.com/vramguard/vramguard/internal/store"
)

var snapFixture, _ = filepath.Abs(filepath.Join("..", "snapshot", "testdata", "v2_6_p5.pickle"))

// TestRunSnapshot: GET /api/v1/runs/{id}/snapshot serves the view of the
// snapshot the run's post-mortem names, the same View the package computes
// from the file; a run without one, or a bad device, gets a clear error.
func TestRunSnapshot(t *testing.T) {
	r := newRig(t, twoJobs, Config{})
	ctx := context.Background()
	pm, _ := json.Marshal(map[string]any{"probe": map[string]any{"oom": map[string]any{"pid": 1, "t": time.Now(),
		"source": "observer", "snapshot_path": snapFixture}}})
	for _, run := range []*store.Run{{ID: "oomed", Status: store.StatusRunning, StartedAt: time.Now()},
		{ID: "plain", Status: store.StatusRunning, StartedAt: time.Now()}} {
		if err := r.st.CreateRun(ctx, run); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.st.FinishRun(ctx, "oomed", store.StatusFinished, "cuda_oom", 1, time.Now(), pm); err != nil {
		t.Fatal(err)
	}
	if err := r.st.FinishRun(ctx, "plain", store.StatusFinished, "", 0, time.Now(), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	s, err := snapshot.ReadFile(snapFixture, snapshot.DefaultLimits, nil)
	if err != nil {
		t.Fatal(err)
	}
	for dev := 0; dev < 2; dev++ {
		code, body := r.do("GET", "/api/v1/runs/oomed/snapshot?device="+string(rune('0'+dev)), "", "")
		if code != 200 {
			t.Fatalf("device %d: %d %s", dev, code, body)
		}
		var got snapshot.View
		if err := json.Unmarshal([]byte(body), &got); err != nil {
			t.Fatal(err)
		}
		o := snapshot.DefaultView
		o.Device = dev
		want := s.View(o)
		wj, _ := json.Marshal(want)
		var w2 snapshot.View
		json.Unmarshal(wj, &w2)
		if !reflect.DeepEqual(got, w2) {
			t.Errorf("device %d: the served view differs from the package's", dev)
		}
	}
	for _, c := range []struct {
		path string
		code int
		want string
	}{
		{"/api/v1/runs/plain/snapshot", 404, "no OOM snapshot"},
		{"/api/v1/runs/nosuch/snapshot", 404, "no run"},
		{"/api/v1/runs/oomed/snapshot?device=5", 400, "devices 0 to 1"},
		{"/api/v1/runs/oomed/snapshot?points=1", 400, "points"},
	} {
		code, body := r.do("GET", c.path, "", "")
		if code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("%s: %d %s, want %d saying %q", c.path, code, body, c.code, c.want)
		}
	}
}

// TestSnapshotHandler: snapshot --serve's handler serves the page at /,
// its assets, and the view; nothing mutates.
func TestSnapshotHandler(t *testing.T) {
	s, err := snapshot.ReadFile(snapFixture, snapshot.DefaultLimits, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(SnapshotHandler(s, "v2_6_p5.pickle"))
	defer srv.Close()
	for _, c := range []struct {
		method, path string
		code         int
		want         string
	}{
		{"GET", "/", 200, `<script src="snapshot.js">`},
		{"GET", "/snapshot.js", 200, "api/v1/snapshot"},
		{"GET", "/api/v1/snapshot?device=1", 200, `"name":"v2_6_p5.pickle","device":1`},
		{"POST", "/api/v1/snapshot", 401, "token"},
		{"GET", "/api/v1/jobs", 404, ""},
	} {
		req, _ := http.NewRequest(c.method, srv.URL+c.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		buf := make([]byte, 1<<16)
		for {
			n, err := resp.Body.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		resp.Body.Close()
		if resp.StatusCode != c.code || !strings.Contains(b.String(), c.want) {
			t.Errorf("%s %s: %d %.200s, want %d with %q", c.method, c.path, resp.StatusCode, b.String(), c.code, c.want)
		}
	}
}
