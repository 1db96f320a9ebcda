package cli

import (
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/timeline"
	"github.com/vramguard/vramguard/internal/usage"
)

// TestReportGroup: report --group asks each node's agent (--url once per
// node) for the job and joins their answers: a node line with its ranks
// beneath, each GPU peak against its GPU's total, each node's host peak
// against what the job asked for.
func TestReportGroup(t *testing.T) {
	t.Setenv("TZ", "UTC")
	from := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	pts := func(n int, gpu, rss, util int64) []timeline.Point {
		var out []timeline.Point
		for i := range n {
			out = append(out, timeline.Point{T: from.Add(time.Duration(i) * time.Minute).UnixMilli(), GPU: gpu, RSS: rss, Util: util})
		}
		return out
	}
	nodes := map[string][]usage.GroupJob{
		"a": {{Job: usage.Job{Key: "run:1", Name: "ranks", Series: []usage.Series{{Step: time.Minute, Points: pts(60, 20<<30, 3<<30, 80)}}},
			Node: "a", Ranks: []int{0}, GPUTotal: 80 << 30, MemRequest: 8 << 30}},
		"b": {{Job: usage.Job{Key: "run:2", Name: "ranks", Series: []usage.Series{{Step: time.Minute, Points: pts(60, 40<<30, 2<<30, 0)}}},
			Node: "b", Ranks: []int{1}, GPUTotal: 80 << 30, MemRequest: 8 << 30}},
	}
	var asked []string
	agent := func(node string) *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			asked = append(asked, r.URL.RequestURI())
			json.NewEncoder(w).Encode(usage.ComputeGroup(r.URL.Query().Get("group"), nodes[node], 1, from, from.Add(time.Hour)))
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	a, b := agent("a"), agent("b")
	run := func(args ...string) string {
		f, out, _ := topFactory(false)
		cmd := NewCmdReport(f)
		cmd.SetArgs(append([]string{"--agent", "none", "--url", a.URL, "--url", b.URL, "--group", "4242"}, args...))
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		if err := cmd.Execute(); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	var rep usage.GroupReport
	if err := json.Unmarshal([]byte(run("--json")), &rep); err != nil {
		t.Fatal(err)
	}
	if len(asked) != 2 || asked[0] != "/api/v1/report?group=4242&range=168h0m0s" {
		t.Errorf("asked %v", asked)
	}
	if len(rep.Nodes) != 2 || len(rep.Ranks) != 2 || rep.Ranks[1].Node != "b" || rep.Ranks[1].GPUPeakFraction != 0.5 ||
		rep.Nodes[0].HostPeakFraction != 3.0/8 || math.Abs(rep.Ranks[0].BusyHours-1) > 1e-9 || math.Abs(rep.Ranks[1].IdleHours-1) > 1e-9 {
		t.Errorf("joined report %+v", rep)
	}
	text := run()
	for _, want := range []string{"job 4242, 2026-12-01 00:00 to 2026-12-01 01:00", "a     0     20 GiB", "25.0% of 80 GiB", "50.0% of 80 GiB",
		"3 GiB      8 GiB  37.5%", "2 GiB      8 GiB  25.0%"} {
		if !strings.Contains(text, want) {
			t.Errorf("the table has no %q:\n%s", want, text)
		}
	}
}
