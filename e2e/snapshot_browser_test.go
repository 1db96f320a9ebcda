package e2e

import (
	"bufio"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/snapshot"
	"github.com/vramguard/vramguard/internal/testbin"
	"github.com/vramguard/vramguard/internal/units"
)

// TestSnapshotServeInChromium: `vramguard snapshot FILE --serve` on a
// committed snapshot draws in headless Chromium, offline: at 800 px the page
// does not scroll sideways; the summary, the timeline's bands, the segment
// map and the site table hold the snapshot's figures (read here from the
// file by the package, not from the server); hovering the timeline names the
// site under the pointer and shows its stack; a block's hover text says its
// size, state and site; clicking it shows its stack.
func TestSnapshotServeInChromium(t *testing.T) {
	t.Parallel()
	file := filepath.Join("..", "internal", "snapshot", "testdata", "v2_6_p5.pickle")
	snap, err := snapshot.ReadFile(file, snapshot.DefaultLimits, nil)
	if err != nil {
		t.Fatal(err)
	}
	cmd := testbin.Vramguard(t, nil, "snapshot", file, "--serve")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) > 0 && strings.HasPrefix(f[0], "http://127.0.0.1:") {
				urls <- f[0]
				return
			}
		}
	}()
	var url string
	select {
	case url = <-urls:
	case <-time.After(30 * time.Second):
		t.Fatal("snapshot --serve printed no loopback URL")
	}

	b := startBrowser(t)
	b.setWidth(800)
	b.open(url)
	b.waitTrue(30*time.Second, "the snapshot page to load", `return document.body.dataset.ready === "0"`)

	sum := snap.Summary(0)[0]
	sites := snap.Sites(0)
	var page struct {
		ScrollWidth, ClientWidth int
		Summary                  []string
		Bands, Segments, Sites   int
		SiteNames                []string
		Resources                []string
	}
	b.eval(`const de = document.documentElement;
		return {ScrollWidth: de.scrollWidth, ClientWidth: de.clientWidth,
		  Summary: [...document.querySelectorAll("#summary dd")].map(d => d.textContent),
		  Bands: document.querySelectorAll("#timeline path.series").length,
		  Segments: document.querySelectorAll("#segmap .seg").length,
		  Sites: document.querySelectorAll("#sites tbody tr").length,
		  SiteNames: [...document.querySelectorAll("#sites tbody td.site")].map(d => d.textContent),
		  Resources: performance.getEntriesByType("resource").map(e => e.name)};`, &page)
	if page.ScrollWidth > page.ClientWidth {
		t.Errorf("800 px: the page scrolls sideways (%d px wide in %d)", page.ScrollWidth, page.ClientWidth)
	}
	if len(page.Summary) < 5 || !strings.HasPrefix(page.Summary[1], units.FormatBytes(sum.Reserved)+" in 5 segments") ||
		!strings.HasPrefix(page.Summary[2], units.FormatBytes(sum.Allocated)+" in "+fmt.Sprint(sum.LiveBlocks)+" live blocks") {
		t.Errorf("summary %q; want reserved %s, allocated %s", page.Summary, units.FormatBytes(sum.Reserved), units.FormatBytes(sum.Allocated))
	}
	if sum.OOM == nil || !strings.Contains(strings.Join(page.Summary, "\n"), sum.OOM.Reason) {
		t.Errorf("summary %q does not give the OOM's reason", page.Summary)
	}
	if page.Segments != sum.Segments || page.Bands == 0 || page.Sites < len(sites) {
		t.Errorf("%d segments drawn (want %d), %d timeline bands, %d site rows (want at least %d)", page.Segments,
			sum.Segments, page.Bands, page.Sites, len(sites))
	}
	for i, s := range sites {
		if i < len(page.SiteNames) && page.SiteNames[i] != s.Site {
			t.Errorf("site row %d is %q, want %q", i, page.SiteNames[i], s.Site)
		}
	}
	for _, r := range page.Resources {
		if !strings.HasPrefix(r, url) {
			t.Errorf("the page fetched %s, not from vramguard", r)
		}
	}

	// hover the timeline at its end, at the bottom band: the site that band
	// is, with its live bytes, and its stack
	var hov struct {
		Text  string
		Stack []string
	}
	b.eval(`const svg = document.querySelector("#timeline svg"), r = svg.getBoundingClientRect();
		svg.dispatchEvent(new MouseEvent("mousemove", {clientX: r.right - 1, clientY: r.bottom - 3, bubbles: true}));
		return {Text: document.getElementById("hover").textContent,
		  Stack: [...document.querySelectorAll("#stack li")].map(l => l.textContent)};`, &hov)
	var tl struct {
		Sites []string
		Last  []float64
	}
	b.eval(`const v = vgs.view; return {Sites: v.sites.map(s => s.site), Last: v.timeline.live.map(s => s[s.length - 1])};`, &tl)
	bottom := -1
	for i, v := range tl.Last {
		if v > 0 {
			bottom = i
			break
		}
	}
	if bottom < 0 {
		t.Fatalf("no site holds memory at the trace's end: %v", tl.Last)
	}
	if !strings.Contains(hov.Text, tl.Sites[bottom]+" holds "+units.FormatBytes(tl.Last[bottom])) || len(hov.Stack) == 0 {
		t.Errorf("hover text %q, stack %q; want %s holding %s", hov.Text, hov.Stack, tl.Sites[bottom], units.FormatBytes(tl.Last[bottom]))
	}

	// a live block: its hover text, and its stack on a click
	var seg *snapshot.Segment
	for _, s := range snap.Segments {
		if s.Device == 0 && (seg == nil || s.Address < seg.Address) {
			seg = s
		}
	}
	bi := -1
	for i := range seg.Blocks {
		if seg.Blocks[i].State == snapshot.ActiveAllocated && seg.Blocks[i].Stack != nil {
			bi = i
			break
		}
	}
	if bi < 0 {
		t.Fatal("the first segment has no live block with a stack")
	}
	blk := seg.Blocks[bi]
	var click struct {
		Title string
		Stack []string
		Site  string
	}
	b.eval(fmt.Sprintf(`const span = document.querySelectorAll("#segmap .seg")[0].querySelectorAll(".bar span")[%d];
		span.click();
		return {Title: span.title, Stack: [...document.querySelectorAll("#stack li")].map(l => l.textContent),
		  Site: (document.querySelector("#stack li.site") || {}).textContent || ""};`, bi), &click)
	site := snapshot.SiteOf(blk.Stack)
	wantTitle := units.FormatBytes(blk.Size) + " active allocated at " + fmt.Sprintf("%#x", blk.Address) + " · " + snapshot.SiteName(site)
	if click.Title != wantTitle {
		t.Errorf("block title %q, want %q", click.Title, wantTitle)
	}
	if len(click.Stack) != blk.Stack.Len() || click.Site != fmt.Sprintf("%s:%d %s", site.File, site.Line, site.Function) {
		t.Errorf("stack shown %q (site %q), want the block's %d frames with %s marked", click.Stack, click.Site,
			blk.Stack.Len(), snapshot.SiteName(site))
	}
}
