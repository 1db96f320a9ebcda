package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/agent"
	"github.com/vramguard/vramguard/internal/store"
)

// TestServeDashboardInChromium loads the dashboard of `serve --simulate
// workstation.json` in headless Chromium: the plots must hold the
// scenario's numbers (the notebook kernel's constant 9 GiB, the container's
// 6 GiB, 80 GiB GPUs), grow live, and show an event posted after the page
// loaded without a reload.
func TestServeDashboardInChromium(t *testing.T) {
	const token = "e2e-token"
	s := startServe(t, "", "--simulate", "../examples/scenarios/workstation.json", "--token", token)
	// Two samples, so every job has a line to draw.
	waitFor(t, 20*time.Second, "two samples per job", func() bool {
		var tl struct{ Timelines []agent.Timeline }
		getJSON(t, s.URL+"/api/v1/timelines?range=15m", &tl)
		return len(tl.Timelines) >= 4 && len(tl.Timelines[0].T) >= 2
	})
	var jobs struct{ Jobs []agent.JobView }
	getJSON(t, s.URL+"/api/v1/jobs", &jobs)
	keys := map[string]string{}
	for _, j := range jobs.Jobs {
		keys[j.Kind] = j.Key
	}
	nb, ctr, ddp := keys["notebook"], keys["container"], keys["process"]
	if nb == "" || ctr == "" || ddp == "" {
		t.Fatalf("scenario jobs missing: %+v", keys)
	}

	b := startBrowser(t)
	b.open(s.URL + "/#range=15m")
	b.waitTrue(30*time.Second, "the dashboard to load", `return document.body.dataset.ready === "15m"`)

	var page struct {
		Devices  []string
		Plots    int
		Canvases int
		NB       []float64
		NBLimit  float64
		NBText   string
		Ctr      []float64
		YMax     float64
	}
	b.eval(fmt.Sprintf(`
		const nb = vg.plots[%q], ctr = vg.plots[%q];
		return {
		  Devices: [...document.querySelectorAll("#devices tbody tr")].map(r => r.textContent),
		  Plots: Object.keys(vg.plots).length,
		  Canvases: [...document.querySelectorAll("#plots canvas")].filter(c => c.width > 0 && c.height > 0).length,
		  NB: nb.data[1], NBLimit: nb.data[4][0],
		  NBText: document.querySelector('.job[data-key=%q] .now').textContent,
		  Ctr: ctr.data[1], YMax: nb.scales.y.max,
		};`, nb, ctr, nb), &page)
	if len(page.Devices) != 2 || !strings.Contains(page.Devices[0], "80.00 GiB") || !strings.Contains(page.Devices[0], "NVIDIA H100 80GB HBM3") {
		t.Errorf("devices table: %q", page.Devices)
	}
	if page.Plots < 4 || page.Canvases < page.Plots {
		t.Errorf("%d plots, %d drawn canvases", page.Plots, page.Canvases)
	}
	if len(page.NB) < 2 {
		t.Fatalf("notebook plot has %d points", len(page.NB))
	}
	for _, v := range page.NB {
		if v != 9<<30 {
			t.Fatalf("notebook plot values %v, want the scenario's 9 GiB", page.NB)
		}
	}
	for _, v := range page.Ctr {
		if v != 6<<30 {
			t.Fatalf("container plot values %v, want the scenario's 6 GiB", page.Ctr)
		}
	}
	if page.NBLimit != 80<<30 || page.YMax < 80<<30 {
		t.Errorf("notebook limit line %v, y axis up to %v; want 80 GiB", page.NBLimit, page.YMax)
	}
	if page.NBText != "used 9.00 GiB of 80.00 GiB" {
		t.Errorf("notebook card says %q", page.NBText)
	}

	// Live: the DDP job's plot grows without a reload.
	var n0 int
	b.eval(fmt.Sprintf(`return vg.plots[%q].data[0].length`, ddp), &n0)
	b.waitTrue(15*time.Second, "new points on the DDP plot", fmt.Sprintf(`return vg.plots[%q].data[0].length > %d`, ddp, n0))

	// Live: an event posted now appears in the list and on the job's plot.
	body, _ := json.Marshal(map[string]string{"job_key": nb, "message": "checkpoint sanity note 42"})
	req, _ := http.NewRequest("POST", s.URL+"/api/v1/events", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("post event: %d", resp.StatusCode)
	}
	b.waitTrue(10*time.Second, "the new event in the page", `
		return [...document.querySelectorAll('#events li[data-kind="note"]')].some(li => li.textContent.includes("checkpoint sanity note 42"))
		  && vg.events.some(e => e.kind === "note" && e.job_key === `+fmt.Sprintf("%q", nb)+`);`)
	var reloaded bool
	b.eval(`return performance.getEntriesByType("navigation").length !== 1`, &reloaded)
	if reloaded {
		t.Error("the page reloaded")
	}
}

// dashboard24h opens the 24 h view of a state directory holding a day of 1
// Hz samples for 50 jobs and returns how long the page took from navigation
// to all plots drawn, in milliseconds.
func dashboard24h(t testing.TB, b *browser, url string) float64 {
	// The first navigation of a fresh browser pays for starting its
	// renderer; a user's browser is already running, so that one is a
	// warm-up (on the 15 min view) and the 24 h view is a second page load.
	b.open(url + "/#range=15m")
	b.waitTrue(60*time.Second, "the 15 min view", `return document.body.dataset.ready === "15m"`)
	b.open(url + "/?view=day#range=24h")
	b.waitTrue(60*time.Second, "the 24 h view", `return document.body.dataset.ready === "24h"`)
	var res struct {
		RenderMs, LoadMs, DOMReady, FetchMs float64
		Plots                               int
		Points                              int
	}
	b.eval(`const tl = performance.getEntriesByType("resource").filter(e => e.name.includes("/api/v1/timelines"))[0];
		return {RenderMs: vg.renderMs, LoadMs: vg.loadMs, DOMReady: performance.getEntriesByType("navigation")[0].domContentLoadedEventEnd,
		FetchMs: tl ? tl.duration : -1, Plots: Object.keys(vg.plots).length,
		Points: Object.values(vg.plots).reduce((n, u) => n + u.data[0].length, 0)}`, &res)
	t.Logf("24 h view: page ready %.0f ms, data fetched in %.0f ms, load+render %.0f ms, all drawn at %.0f ms", res.DOMReady, res.FetchMs, res.LoadMs, res.RenderMs)
	// A plot gets one peak per pixel column at most (about 600 of the
	// 1440 minutes at this window size; never fewer than 300).
	if res.Plots != 50 || res.Points < 50*300 {
		t.Fatalf("24 h view: %d plots with %d points, want 50 with 300+ each", res.Plots, res.Points)
	}
	return res.RenderMs
}

// TestServeDashboard24h checks the 24 h view of 50 jobs renders whole (the
// time it takes is measured by BenchmarkServeDashboard24h, not asserted).
func TestServeDashboard24h(t *testing.T) {
	home := dayHome(t)
	s := startServe(t, home, "--gpu-backend", "none", "--probe-socket", "none")
	b := startBrowser(t)
	ms := dashboard24h(t, b, s.URL)
	t.Logf("24 h view of 50 jobs rendered %.0f ms after navigation", ms)
}

func dayHome(t *testing.T) string {
	home := t.TempDir()
	st, err := store.Open(home)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := agent.Synthesize(context.Background(), st, agent.Retention{}, 50, 24*time.Hour, time.Now()); err != nil {
		t.Fatal(err)
	}
	return home
}
