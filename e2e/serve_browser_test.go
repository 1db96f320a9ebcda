package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image/png"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/agent"
	"github.com/vramguard/vramguard/internal/store"
	"github.com/vramguard/vramguard/internal/testbin"
	"github.com/vramguard/vramguard/internal/units"
)

// TestServeDashboardInChromium loads the dashboard of `serve --simulate
// workstation.json` in headless Chromium: the plots must hold the
// scenario's numbers (the notebook kernel's constant 9 GiB, the container's
// 6 GiB, 80 GiB GPUs), grow live, and show an event posted after the page
// loaded without a reload.
func TestServeDashboardInChromium(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
	home := dayHome(t)
	s := startServe(t, home, "--gpu-backend", "none", "--probe-socket", "none")
	b := startBrowser(t)
	ms := dashboard24h(t, b, s.URL)
	t.Logf("24 h view of 50 jobs rendered %.0f ms after navigation", ms)
}

func dayHome(t *testing.T) string {
	home := t.TempDir()
	st := testbin.OpenStore(t, home)
	defer st.Close()
	if err := agent.Synthesize(context.Background(), st, agent.Retention{}, 50, 24*time.Hour, time.Now()); err != nil {
		t.Fatal(err)
	}
	return home
}

// TestServeDashboardLayout opens the dashboard of `serve --simulate
// workstation.json` over a state directory that also holds two supervised
// runs (one failed twice, one succeeded) and an ended job whose timeline has
// a four-minute hole, at 1400 and at 800 px wide, and checks what a user
// sees: the page never scrolls sideways and every column of every table is
// in view; ticks are whole binary units labelled truly; the limit line is
// labelled; the ended job's line breaks over its hole; verdicts read
// "judging — N more minutes"; reasons are coloured by meaning and runs
// without GPU memory show "—"; a run's post-mortem reads as `explain`
// prints it. Screenshots go to $VRAMGUARD_SCREENSHOTS when it is set.
func TestServeDashboardLayout(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	e := &env{t: t, home: home}
	flag := filepath.Join(t.TempDir(), "tried")
	failing := e.run("run", "--name", "failing", "--restart", "on-failure", "--max-restarts", "1", "--backoff", "10ms", "--stable-after", "0s", "--",
		python, "-c", `import os, sys
first = not os.path.exists(sys.argv[1])
open(sys.argv[1], "w").close()
if first:
    sys.exit(3)
raise ValueError("bad batch shape (3, 224)")`, flag)
	if failing.code != 1 {
		t.Fatalf("failing run: exit %d\n%s", failing.code, failing.stderr)
	}
	if r := e.run("run", "--name", "fine", "--", "/bin/true"); r.code != 0 {
		t.Fatalf("fine run: exit %d\n%s", r.code, r.stderr)
	}
	var explained struct {
		RunID    string   `json:"run_id"`
		Reason   string   `json:"reason"`
		Evidence []string `json:"evidence"`
		Advice   []string `json:"advice"`
		Attempts []struct {
			Reason string `json:"reason"`
		} `json:"attempts_detail"`
	}
	if b, _ := json.Marshal(e.explain("failing")); json.Unmarshal(b, &explained) != nil || len(explained.Attempts) != 2 || len(explained.Evidence) == 0 {
		t.Fatalf("explain --json failing: %s", b)
	}
	text := e.run("explain", "failing")
	if text.code != 0 {
		t.Fatalf("explain failing: %d %s", text.code, text.stderr)
	}
	gapStart, gapEnd := gappyJob(t, home, time.Now())

	s := startServe(t, home, "--simulate", "../examples/scenarios/workstation.json")
	waitFor(t, 20*time.Second, "two samples per job", func() bool {
		var tl struct{ Timelines []agent.Timeline }
		getJSON(t, s.URL+"/api/v1/timelines?range=15m", &tl)
		return len(tl.Timelines) >= 5 && len(tl.Timelines[0].T) >= 2
	})
	b := startBrowser(t)
	for _, width := range []int{1400, 800} {
		b.setWidth(width)
		if width == 1400 {
			b.open(s.URL + "/#range=15m")
			b.waitTrue(30*time.Second, "the dashboard to load", `return document.body.dataset.ready === "15m"`)
		}
		// plots follow the window
		b.waitTrue(10*time.Second, "plots fitted to the window", `const w = plotWidth(); return Object.values(vg.plots).every(u => u.width === w)`)

		checkTicksAndLimit(t, b, width)
		checkGap(t, b, gapStart, gapEnd)
		checkVerdicts(t, b, s.URL)
		if width == 1400 {
			checkUserFilter(t, b, s.URL)
		}
		checkRuns(t, b, explained.RunID, explained.Reason, explained.Evidence, explained.Advice, len(explained.Attempts))
		checkSameAsExplain(t, b, text.stdout)
		checkLayout(t, b, width)
		b.eval(`scrollTo(0, 0); return true`, nil)
		b.screenshot(fmt.Sprintf("dashboard-%d", width), width)
		b.eval(`document.getElementById("runs").scrollIntoView(); return true`, nil)
		b.screenshot(fmt.Sprintf("dashboard-%d-postmortem", width), width)
	}
}

// gappyJob records an ended job, eval.py, seen from 8 to 7 and from 3 to 2
// minutes before now (its samples stored as the agent stores them), and
// returns the hole's bounds in Unix seconds.
func gappyJob(t *testing.T, home string, now time.Time) (float64, float64) {
	st := testbin.OpenStore(t, home)
	defer st.Close()
	ctx := context.Background()
	t0 := now.Add(-8 * time.Minute).Truncate(time.Second)
	info, _ := json.Marshal(map[string]any{"labels": agent.Labels{Job: "python3 eval.py", Kind: "process"}, "devices": []int{0}, "limit_bytes": int64(80 << 30)})
	id, err := st.UpsertAgentJob(ctx, &store.AgentJob{Key: "pid:910400:7", Kind: "process", Name: "python3 eval.py", Info: info,
		FirstSeen: t0, LastSeen: t0.Add(6 * time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.EndAgentJob(ctx, id, t0.Add(6*time.Minute)); err != nil {
		t.Fatal(err)
	}
	tl := agent.NewTimelines(st, agent.Retention{})
	for _, span := range [][2]int{{0, 60}, {300, 360}} {
		for s := span[0]; s <= span[1]; s++ {
			tl.Add(id, agent.Point{T: t0.Add(time.Duration(s) * time.Second).UnixMilli(), GPU: 12 << 30, RSS: 3 << 30, Alloc: -1, Reserved: -1})
		}
	}
	if err := tl.Close(ctx); err != nil {
		t.Fatal(err)
	}
	return float64(t0.Unix() + 60), float64(t0.Unix() + 300)
}

// checkTicksAndLimit: every y tick of every plot is a whole number of MiB
// whose label reads back (as vramguard reads sizes) to the tick's value;
// the notebook's plot labels its limit line, next to the line.
func checkTicksAndLimit(t *testing.T, b *browser, width int) {
	t.Helper()
	var plots []struct {
		Key    string
		Splits []float64
		Labels []string
		Limit  string
		Off    float64 // px between the line and the label's nearer edge
	}
	b.eval(`return Object.values(vg.plots).map(u => {
		const lab = u.over.querySelector(".limit-label"), tl = vg.timelines[u.vgKey];
		const y = lab ? u.valToPos(tl.limit_bytes, "y") : 0;
		return {Key: u.vgKey, Splits: u.axes[1]._splits, Labels: u.axes[1]._values, Limit: lab ? lab.textContent : "",
		  Off: !lab ? -1 : y >= lab.offsetTop + lab.offsetHeight ? y - (lab.offsetTop + lab.offsetHeight) : y <= lab.offsetTop ? lab.offsetTop - y : -1};
	})`, &plots)
	if len(plots) < 5 {
		t.Fatalf("%d px: %d plots", width, len(plots))
	}
	for _, p := range plots {
		if len(p.Splits) < 2 || len(p.Splits) != len(p.Labels) {
			t.Fatalf("%d px, %s: ticks %v labelled %q", width, p.Key, p.Splits, p.Labels)
		}
		for i, v := range p.Splits {
			got, err := units.ParseBytes(p.Labels[i])
			if math.Mod(v, 1<<20) != 0 || err != nil || float64(got) != v {
				t.Errorf("%d px, %s: tick %v labelled %q (reads %d, %v)", width, p.Key, v, p.Labels[i], got, err)
			}
		}
		if strings.HasPrefix(p.Key, "notebook:") && (p.Limit != "limit 80 GiB (GPU 1 total)" || p.Off < 0 || p.Off > 6) {
			t.Errorf("%d px: the notebook's limit line is labelled %q, %.0f px from it (-1: over it)", width, p.Limit, p.Off)
		}
	}
}

// checkGap: eval.py's line stops at the hole and starts again after it:
// its data has a null point inside the hole, and the canvas holds none of
// the line's colour over the hole but does over the samples either side.
func checkGap(t *testing.T, b *browser, gapStart, gapEnd float64) {
	t.Helper()
	var res struct {
		Nulls                 []float64
		Before, Inside, After int
	}
	b.eval(fmt.Sprintf(`const u = vg.plots["pid:910400:7"];
		if (!u) return {Nulls: [], Before: -1, Inside: -1, After: -1};
		const nulls = u.data[0].filter((t, i) => u.data[1][i] === null);
		// pixels of the "used" line's colour in the plot area's column at time t
		const blue = (t) => {
		  const x = Math.round(u.valToPos(t, "x", true)), img = u.ctx.getImageData(x, u.bbox.top, 1, u.bbox.height).data;
		  let n = 0;
		  for (let i = 0; i < img.length; i += 4) if (Math.abs(img[i] - 47) < 40 && Math.abs(img[i+1] - 111) < 40 && Math.abs(img[i+2] - 223) < 40) n++;
		  return n;
		};
		return {Nulls: nulls, Before: blue(%f - 30), Inside: blue(%f), After: blue(%f + 30)};`, gapStart, (gapStart+gapEnd)/2, gapEnd), &res)
	if len(res.Nulls) != 1 || res.Nulls[0] <= gapStart || res.Nulls[0] >= gapEnd {
		t.Errorf("eval.py's plot: null points at %v, want one inside the hole (%v, %v)", res.Nulls, gapStart, gapEnd)
	}
	if res.Before == 0 || res.After == 0 || res.Inside != 0 {
		t.Errorf("eval.py's line on the canvas: %d px before the hole, %d inside, %d after; want some, none, some", res.Before, res.Inside, res.After)
	}
}

// checkUserFilter: every job's row shows its owner as the API gives it;
// choosing a user in the filter leaves that user's jobs alone, and
// "everyone" brings the rest back.
func checkUserFilter(t *testing.T, b *browser, url string) {
	t.Helper()
	var jobs struct{ Jobs []agent.JobView }
	getJSON(t, url+"/api/v1/jobs?range=15m", &jobs)
	var rows map[string]string
	b.eval(`return Object.fromEntries([...document.querySelectorAll("#jobs tbody tr[data-key]")].filter(tr => tr.querySelector("td.user")).map(tr => [tr.dataset.key, tr.querySelector("td.user").textContent]))`, &rows)
	ana := 0
	for _, j := range jobs.Jobs {
		if j.Live && rows[j.Key] != j.User {
			t.Errorf("job %s: user cell %q, the API says %q", j.Name, rows[j.Key], j.User)
		}
		if j.User == "ana" {
			ana++
		}
	}
	if ana < 2 {
		t.Fatalf("the scenario's ana owns %d jobs, want at least 2: %+v", ana, jobs.Jobs)
	}
	var shown []string
	b.eval(`const sel = document.getElementById("user-filter"); sel.value = "ana"; sel.dispatchEvent(new Event("change"));
		return [...document.querySelectorAll("#jobs tbody tr[data-key] td.user")].map(td => td.textContent)`, &shown)
	if len(shown) != ana || slices.ContainsFunc(shown, func(u string) bool { return u != "ana" }) {
		t.Errorf("filtered to ana: rows of %q, want her %d jobs", shown, ana)
	}
	var n int
	b.eval(`const sel = document.getElementById("user-filter"); sel.value = ""; sel.dispatchEvent(new Event("change"));
		return document.querySelectorAll("#jobs tbody tr[data-key] td.user").length`, &n)
	if n != len(rows) {
		t.Errorf("filter cleared: %d rows, want %d", n, len(rows))
	}
}

// checkVerdicts: a job the sampler's monitor has not judged yet reads
// "judging — N more minutes", N from the API's judging_s; the ended job
// has no verdict.
func checkVerdicts(t *testing.T, b *browser, url string) {
	t.Helper()
	var jobs struct{ Jobs []agent.JobView }
	getJSON(t, url+"/api/v1/jobs?range=15m", &jobs)
	var rows map[string]string
	b.eval(`return Object.fromEntries([...document.querySelectorAll("#jobs tbody tr")].map(tr => [tr.dataset.key, tr.querySelector("td.verdict").textContent]))`, &rows)
	re := regexp.MustCompile(`^judging — (\d+) more minutes?$`)
	judging := 0
	for _, j := range jobs.Jobs {
		got := rows[j.Key]
		if j.JudgingS == nil {
			if !j.Live && got != "–" {
				t.Errorf("ended job %s: verdict %q", j.Name, got)
			}
			continue
		}
		judging++
		m := re.FindStringSubmatch(got)
		n, _ := strconv.Atoi(m2(m))
		lo, hi := int(math.Ceil((*j.JudgingS-10)/60)), int(math.Ceil((*j.JudgingS+10)/60))
		if m == nil || n < max(lo, 1) || n > hi {
			t.Errorf("%s: verdict %q, the API says %.0f s more", j.Name, got, *j.JudgingS)
		}
	}
	if judging < 4 {
		t.Errorf("%d jobs being judged, want the scenario's 4", judging)
	}
}

func m2(m []string) string {
	if len(m) < 2 {
		return ""
	}
	return m[1]
}

// checkRuns: the runs' reasons are coloured by meaning (success not as a
// failure), neither run shows a GPU peak it did not have, and clicking the
// failed run renders its post-mortem as explain does: its reason, every
// line of evidence and advice, both attempts, the memory timeline and the
// probe's facts, with no JSON in sight.
func checkRuns(t *testing.T, b *browser, id, reason string, evidence, advice []string, attempts int) {
	t.Helper()
	var runs []struct{ Name, Reason, Class, Color, Peak string }
	b.eval(`return [...document.querySelectorAll("#runs tbody tr")].map(tr => {
		const c = tr.querySelector("td.reason");
		return {Name: tr.cells[0].textContent, Reason: c.textContent, Class: c.className, Color: getComputedStyle(c).color, Peak: tr.cells[4].textContent};
	})`, &runs)
	colors := map[string]string{}
	for _, r := range runs {
		colors[r.Name] = r.Color
		if r.Peak != "—" {
			t.Errorf("run %s without GPU memory shows peak GPU %q", r.Name, r.Peak)
		}
	}
	if len(runs) != 2 || colors["fine"] == "" || colors["fine"] == colors["failing"] || !strings.Contains(runs[0].Class+runs[1].Class, "good") {
		t.Fatalf("runs: %+v", runs)
	}
	b.eval(fmt.Sprintf(`document.querySelector('#runs tbody tr[data-id=%q]').click(); return true`, id), nil)
	b.waitTrue(10*time.Second, "the post-mortem", fmt.Sprintf(`const pm = document.getElementById("postmortem"); return !pm.hidden && pm.dataset.run === %q`, id))
	var pm struct {
		Text, Reason, ReasonClass string
		Sections                  []string
		Evidence, Advice          []string
		Attempts                  []string
		Wide                      bool
	}
	b.eval(`const pm = document.getElementById("postmortem");
		return {Text: pm.textContent, Reason: pm.querySelector("dd .reason").textContent, ReasonClass: pm.querySelector("dd .reason").className,
		  Sections: [...pm.querySelectorAll("h4")].map(h => h.textContent),
		  Evidence: [...pm.querySelectorAll(".evidence li")].map(li => li.textContent),
		  Advice: [...pm.querySelectorAll(".advice li")].map(li => li.textContent),
		  Attempts: [...pm.querySelectorAll(".attempts tr")].map(tr => tr.textContent),
		  Wide: pm.scrollWidth > pm.clientWidth};`, &pm)
	if pm.Reason != reason || !strings.Contains(pm.ReasonClass, "bad") {
		t.Errorf("post-mortem reason %q (%s), explain says %q", pm.Reason, pm.ReasonClass, reason)
	}
	if strings.Join(pm.Evidence, "\n") != strings.Join(evidence, "\n") || strings.Join(pm.Advice, "\n") != strings.Join(advice, "\n") {
		t.Errorf("post-mortem evidence %q and advice %q; explain's: %q, %q", pm.Evidence, pm.Advice, evidence, advice)
	}
	want := []string{"evidence", "what to change", "restart", "attempts", "monitor", "memory timeline", "probe (inside PyTorch)"}
	if strings.Join(pm.Sections, ",") != strings.Join(want, ",") {
		t.Errorf("post-mortem sections %q, want %q", pm.Sections, want)
	}
	if len(pm.Attempts) != attempts || !strings.Contains(pm.Attempts[0], "exit_error") || !strings.Contains(pm.Attempts[1], "python_exception") {
		t.Errorf("post-mortem attempts %q", pm.Attempts)
	}
	if strings.Contains(pm.Text, `":`) || strings.Contains(pm.Text, "{") || pm.Wide {
		t.Errorf("post-mortem shows JSON or runs wider than its box (%v): %s", pm.Wide, pm.Text)
	}
}

// checkSameAsExplain: every line of the post-mortem's monitor, memory and
// probe sections reads as the line of the same name in `explain`'s text.
func checkSameAsExplain(t *testing.T, b *browser, explain string) {
	t.Helper()
	sections := map[string][]string{} // explain's section title -> its lines
	title := ""
	for _, l := range strings.Split(explain, "\n") {
		switch {
		case strings.TrimSpace(l) == "":
			title = ""
		case title == "" && !strings.HasPrefix(l, " "):
			title = l
		default:
			sections[title] = append(sections[title], strings.Join(strings.Fields(l), " "))
		}
	}
	var rows []struct{ Section, Line string }
	b.eval(`return [...document.querySelectorAll("#postmortem section.monitor, #postmortem section.memory, #postmortem section.probe")].flatMap(sec =>
		[...sec.querySelectorAll("dt")].map(dt => ({Section: sec.querySelector("h4").textContent, Line: dt.textContent + " " + dt.nextElementSibling.textContent})))`, &rows)
	if len(rows) < 5 {
		t.Fatalf("post-mortem monitor, memory and probe lines: %q", rows)
	}
	for _, r := range rows {
		line := strings.Join(strings.Fields(r.Line), " ")
		found := false
		for _, l := range sections[r.Section] {
			found = found || l == line
		}
		if !found {
			t.Errorf("post-mortem %s line %q is not explain's: %q", r.Section, line, sections[r.Section])
		}
	}
}

// checkLayout: the page does not scroll sideways, and every header cell of
// every table lies inside the viewport.
func checkLayout(t *testing.T, b *browser, width int) {
	t.Helper()
	var l struct {
		ScrollWidth, ClientWidth, InnerWidth int
		Headers                              int
		Outside                              []string
	}
	b.eval(`const de = document.documentElement, vw = de.clientWidth, out = [];
		const ths = [...document.querySelectorAll("table th")];
		for (const th of ths) {
		  const r = th.getBoundingClientRect();
		  if (r.width <= 0 || r.height <= 0 || r.left < 0 || r.right > vw + 0.5) out.push(th.closest("table").id + " " + JSON.stringify(th.textContent) + " " + r.left.toFixed(0) + ".." + r.right.toFixed(0));
		}
		for (const c of document.querySelectorAll("#plots canvas, #postmortem *")) {
		  const r = c.getBoundingClientRect();
		  if (r.right > vw + 0.5) out.push(c.tagName + " " + c.className + " ends at " + r.right.toFixed(0));
		}
		return {ScrollWidth: de.scrollWidth, ClientWidth: vw, InnerWidth: innerWidth, Headers: ths.length, Outside: out};`, &l)
	if l.InnerWidth != width {
		t.Fatalf("the window is %d px wide, want %d", l.InnerWidth, width)
	}
	if l.ScrollWidth > l.ClientWidth {
		t.Errorf("%d px: the page scrolls sideways (%d px wide in %d)", width, l.ScrollWidth, l.ClientWidth)
	}
	if l.Headers < 20 || len(l.Outside) > 0 {
		t.Errorf("%d px: of %d header cells these are out of view: %q", width, l.Headers, l.Outside)
	}
}

// setWidth sizes the window so that the page is width CSS px wide.
func (b *browser) setWidth(width int) {
	b.t.Helper()
	var chrome int
	b.eval(`return window.outerWidth - window.innerWidth`, &chrome)
	b.call("POST", "/session/"+b.session+"/window/rect", map[string]any{"width": width + max(chrome, 0), "height": 1000}, nil)
	b.waitTrue(5*time.Second, fmt.Sprintf("a %d px window", width), fmt.Sprintf(`return window.innerWidth === %d`, width))
}

// screenshot takes a PNG of the viewport, checks it is the window's width,
// and writes it to $VRAMGUARD_SCREENSHOTS/NAME.png when set.
func (b *browser) screenshot(name string, width int) {
	b.t.Helper()
	var res struct{ Value string }
	b.call("GET", "/session/"+b.session+"/screenshot", nil, &res)
	data, err := base64.StdEncoding.DecodeString(res.Value)
	if err != nil {
		b.t.Fatal(err)
	}
	img, err := png.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		b.t.Fatalf("screenshot: %v", err)
	}
	var dpr float64
	b.eval(`return window.devicePixelRatio`, &dpr)
	if img.Width != int(float64(width)*dpr) {
		b.t.Errorf("screenshot is %d px wide, want %d", img.Width, width)
	}
	if dir := os.Getenv("VRAMGUARD_SCREENSHOTS"); dir != "" {
		if err := os.WriteFile(filepath.Join(dir, name+".png"), data, 0o644); err != nil {
			b.t.Error(err)
		}
	}
}
