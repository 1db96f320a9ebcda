package agent

import (
	"io/fs"
	"net/http"
	"strconv"
	"sync"

	"github.com/vramguard/vramguard/internal/agent/web"
	"github.com/vramguard/vramguard/internal/snapshot"
)

// serveSnapshotView answers GET ...?device=N&points=P with s's view
// (snapshot.View): downsampled here, so a file of any size draws at once.
func serveSnapshotView(w http.ResponseWriter, r *http.Request, s *snapshot.Snapshot, name string) {
	o := snapshot.DefaultView
	if d := r.URL.Query().Get("device"); d != "" {
		n, err := strconv.Atoi(d)
		if err != nil || n < 0 || n >= len(s.Devices()) {
			writeErr(w, http.StatusBadRequest, "device %q: the snapshot covers devices 0 to %d", d, len(s.Devices())-1)
			return
		}
		o.Device = n
	}
	if p := r.URL.Query().Get("points"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 2 || n > 5000 {
			writeErr(w, http.StatusBadRequest, "points %q: want 2 to 5000", p)
			return
		}
		o.Points = n
	}
	writeJSON(w, http.StatusOK, struct {
		Name string `json:"name"`
		snapshot.View
	}{name, s.View(o)})
}

// SnapshotHandler serves one snapshot in the browser, for `vramguard
// snapshot FILE --serve`: the dashboard's snapshot page at / (its assets
// embedded; nothing is fetched from elsewhere) and its data at
// GET /api/v1/snapshot. Nothing else is served.
func SnapshotHandler(s *snapshot.Snapshot, name string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/snapshot", func(w http.ResponseWriter, r *http.Request) {
		serveSnapshotView(w, r, s, name)
	})
	sub, _ := fs.Sub(web.Assets, "static")
	files := http.FileServer(http.FS(sub))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.ServeFileFS(w, r, sub, "snapshot.html")
	})
	mux.Handle("GET /", files)
	return secure("", mux)
}

// runSnapshots caches the decoded OOM snapshots of runs, by path: the page
// asks again for each device.
type runSnapshots struct {
	mu    sync.Mutex
	path  string
	snap  *snapshot.Snapshot
	err   error
	ready chan struct{}
}

// apiRunSnapshot answers GET /api/v1/runs/{id}/snapshot: the view of the
// memory snapshot the run's probe dumped at its OOM (run --oom-snapshot).
func (a *Agent) apiRunSnapshot(w http.ResponseWriter, r *http.Request) {
	run, doc, ok := a.pathDocument(w, r)
	if !ok {
		return
	}
	if doc.Probe == nil || doc.Probe.OOM == nil || doc.Probe.OOM.SnapshotPath == "" {
		writeErr(w, http.StatusNotFound, "run %s has no OOM snapshot (run --oom-snapshot records one)", run.ID)
		return
	}
	path := doc.Probe.OOM.SnapshotPath
	s, err := a.snapshots.load(path)
	if err != nil {
		writeErr(w, http.StatusUnprocessableEntity, "%v", err)
		return
	}
	serveSnapshotView(w, r, s, path)
}

// load decodes path once; concurrent callers wait for the one decode.
func (c *runSnapshots) load(path string) (*snapshot.Snapshot, error) {
	c.mu.Lock()
	if c.path == path && c.ready != nil {
		ready := c.ready
		c.mu.Unlock()
		<-ready
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.snap, c.err
	}
	c.path, c.ready = path, make(chan struct{})
	ready := c.ready
	c.mu.Unlock()
	s, err := snapshot.ReadFile(path, snapshot.DefaultLimits, nil)
	c.mu.Lock()
	c.snap, c.err = s, err
	c.mu.Unlock()
	close(ready)
	return s, err
}
