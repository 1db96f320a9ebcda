package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/testbin"
)

// TestDashboardRankRows: a live 2-rank job (a launcher named torchrun
// starting two ranks named python, each with a DataLoader-like worker, as
// torchrun's environment names them) is listed in the dashboard's jobs
// table with its processes grouped by rank, in rank order, each rank's GPU
// memory the driver's figure for its process (the scenario's), its workers
// listed under it; at 800 px the row does not make the page scroll
// sideways.
func TestDashboardRankRows(t *testing.T) {
	rank := testbin.StartRankJob(t).Rank
	dir := t.TempDir()
	t.Setenv("VG_R0", strconv.Itoa(rank[0]))
	t.Setenv("VG_R1", strconv.Itoa(rank[1]))
	scen := filepath.Join(dir, "ranks.json")
	if err := os.WriteFile(scen, []byte(`{"name": "ranks", "duration": "10m",
  "devices": [{"name": "GPU", "uuid": "GPU-r-0", "total": "80GiB"}, {"name": "GPU", "uuid": "GPU-r-1", "total": "80GiB"}],
  "processes": [{"pid": "$VG_R0", "device": 0, "memory": "3GiB"}, {"pid": "$VG_R1", "device": 1, "memory": "5GiB"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, "", "--simulate", scen, "--probe-socket", "none")

	type proc struct {
		PID      int    `json:"pid"`
		Rank     *int   `json:"rank"`
		GPUBytes uint64 `json:"gpu_bytes"`
		RSSBytes uint64 `json:"rss_bytes"`
	}
	var job struct {
		Key       string `json:"key"`
		Processes []proc `json:"processes"`
	}
	waitFor(t, 20*time.Second, "the job's ranks in /api/v1/jobs", func() bool {
		var jobs struct {
			Jobs []struct {
				Key       string `json:"key"`
				Processes []proc `json:"processes"`
			} `json:"jobs"`
		}
		getJSON(t, s.URL+"/api/v1/jobs", &jobs)
		for _, j := range jobs.Jobs {
			ranked := 0
			for _, p := range j.Processes {
				if p.Rank != nil {
					ranked++
				}
			}
			if ranked >= 4 { // two ranks and a worker each
				job.Key, job.Processes = j.Key, j.Processes
				return true
			}
		}
		return false
	})
	gpu := map[string]uint64{}
	for _, p := range job.Processes {
		k := "none"
		if p.Rank != nil {
			k = strconv.Itoa(*p.Rank)
		}
		gpu[k] += p.GPUBytes
	}
	if gpu["0"] != 3<<30 || gpu["1"] != 5<<30 {
		t.Fatalf("API: rank GPU bytes %v, want 3 GiB and 5 GiB", gpu)
	}

	b := startBrowser(t)
	b.setWidth(800)
	b.open(s.URL + "/#range=15m")
	b.waitTrue(30*time.Second, "the rank rows", fmt.Sprintf(`return document.querySelectorAll('tr.ranks[data-key=%q] li').length >= 3`, job.Key))
	var items []struct{ Rank, Text string }
	b.eval(fmt.Sprintf(`return [...document.querySelectorAll('tr.ranks[data-key=%q] li')].map(li => ({Rank: li.dataset.rank, Text: li.textContent}))`, job.Key), &items)
	var order []string
	for _, it := range items {
		order = append(order, it.Rank)
	}
	if strings.Join(order, ",") != "none,0,1" {
		t.Errorf("rank rows in order %q, want the launcher, then ranks 0 and 1", order)
	}
	for _, it := range items {
		switch it.Rank {
		case "0":
			if !strings.HasPrefix(it.Text, "rank 0/2 (local rank 0)") || !strings.Contains(it.Text, "GPU 3.00 GiB") || !strings.Contains(it.Text, strconv.Itoa(rank[0])) {
				t.Errorf("rank 0 row: %q", it.Text)
			}
		case "1":
			if !strings.HasPrefix(it.Text, "rank 1/2 (local rank 1)") || !strings.Contains(it.Text, "GPU 5.00 GiB") || !strings.Contains(it.Text, "(worker)") {
				t.Errorf("rank 1 row: %q", it.Text)
			}
		}
	}
	var scroll struct{ ScrollWidth, ClientWidth int }
	b.eval(`const de = document.documentElement; return {ScrollWidth: de.scrollWidth, ClientWidth: de.clientWidth}`, &scroll)
	if scroll.ScrollWidth > scroll.ClientWidth {
		t.Errorf("800 px: the rank rows make the page scroll sideways (%d px in %d)", scroll.ScrollWidth, scroll.ClientWidth)
	}
}
