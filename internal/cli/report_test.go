package cli

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/timeline"
	"github.com/vramguard/vramguard/internal/usage"
)

// reportFrom is the start of the fake agent's samples.
var reportFrom = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

// reportJobs are two users' jobs as the fake agent holds them: ana's
// kernel on GPU 0 idle for two hours, ben's job on GPUs 1 (30 GiB, 90%)
// and 2 (10 GiB, 0%) for an hour, one sample a minute.
func reportJobs() []usage.Job {
	pts := func(n int, gpus ...timeline.DevicePoint) []usage.Series {
		s := usage.Series{Step: time.Minute}
		for i := range n {
			p := timelinePoint(reportFrom.Add(time.Duration(i)*time.Minute), 0, -1)
			for _, d := range gpus {
				p.GPU += d.Bytes
				p.Util = min(max(p.Util, 0)+d.Util, 100)
			}
			p.GPUs = gpus
			s.Points = append(s.Points, p)
		}
		return []usage.Series{s}
	}
	return []usage.Job{
		{Key: "notebook:a", Name: "kernel 5e7c2a91", User: "ana", Devices: []int{0}, Series: pts(120, timeline.DevicePoint{Index: 0, Bytes: 20 << 30, Util: 0})},
		{Key: "pid:1:2", Name: "python3 train.py", User: "ben", Devices: []int{1, 2},
			Series: pts(60, timeline.DevicePoint{Index: 1, Bytes: 30 << 30, Util: 90}, timeline.DevicePoint{Index: 2, Bytes: 10 << 30, Util: 0}),
			Died:   []string{"process python3 train.py died after a CUDA OOM"}},
	}
}

// fakeReportAgent answers GET /api/v1/report with the accounting usage
// computes from reportJobs, and records the query it got.
func fakeReportAgent(t *testing.T, got *string) *httptest.Server {
	t.Helper()
	jobs := reportJobs()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		*got = r.URL.RequestURI()
		by := r.URL.Query().Get("by")
		json.NewEncoder(w).Encode(usage.Compute(jobs, by, 1, reportFrom, reportFrom.Add(7*24*time.Hour)))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestReport(t *testing.T) {
	t.Setenv("TZ", "UTC")
	var got string
	srv := fakeReportAgent(t, &got)
	tests := []struct {
		name, golden, query string
		args                []string
	}{
		{"by user", "report-user.golden", "/api/v1/report?by=user&range=168h0m0s", nil},
		{"by gpu", "report-gpu.golden", "/api/v1/report?by=gpu&range=168h0m0s", []string{"--by", "gpu"}},
		{"by gpu, csv", "report-gpu.csv.golden", "/api/v1/report?by=gpu&range=36h0m0s", []string{"--by", "gpu", "--since", "1.5d", "--csv"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, out, _ := topFactory(false)
			cmd := NewCmdReport(f)
			cmd.SetArgs(append([]string{"--agent", "none", "--url", srv.URL}, tt.args...))
			cmd.SilenceUsage, cmd.SilenceErrors = true, true
			if err := cmd.Execute(); err != nil {
				t.Fatal(err)
			}
			if got != tt.query {
				t.Errorf("asked %s, want %s", got, tt.query)
			}
			golden(t, tt.golden, out.String())
		})
	}
	t.Run("by gpu, the samples' sums", func(t *testing.T) {
		// each GPU's memory-hours and held, busy and idle hours as this test
		// sums them from the samples it fed, to the printed 2 decimals
		type sums struct{ mem, held, busy, idle float64 }
		want := map[string]*sums{}
		for _, j := range reportJobs() {
			for _, p := range j.Series[0].Points {
				for _, d := range p.GPUs {
					g := strconv.Itoa(d.Index)
					if want[g] == nil {
						want[g] = &sums{}
					}
					h := time.Minute.Hours()
					want[g].mem += float64(d.Bytes) / (1 << 30) * h
					want[g].held += h
					if d.Util < 1 {
						want[g].idle += h
					} else {
						want[g].busy += h
					}
				}
			}
		}
		f, out, _ := topFactory(false)
		cmd := NewCmdReport(f)
		cmd.SetArgs([]string{"--agent", "none", "--url", srv.URL, "--by", "gpu", "--csv"})
		if err := cmd.Execute(); err != nil {
			t.Fatal(err)
		}
		recs, err := csv.NewReader(strings.NewReader(out.String())).ReadAll()
		if err != nil || len(recs) != 1+len(want) {
			t.Fatalf("%d records (%v), want a header and %d GPUs:\n%s", len(recs), err, len(want), out)
		}
		for _, rec := range recs[1:] {
			w := want[rec[0]]
			if w == nil {
				t.Fatalf("a row for GPU %q", rec[0])
			}
			for i, v := range []float64{w.mem, w.held, w.busy, w.idle} {
				if got, want := rec[2+i], fmt.Sprintf("%.2f", v); got != want {
					t.Errorf("GPU %s %s: %s, the samples sum to %s", rec[0], recs[0][2+i], got, want)
				}
			}
		}
	})
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--by", "pod"}, ExitUsage, "want user, job or gpu"},
		{[]string{"--since", "-2d"}, ExitUsage, "positive number of days"},
		{[]string{"--since", "fortnight"}, ExitUsage, "positive duration"},
		{[]string{"--json", "--csv"}, ExitUsage, "cannot be used together"},
		{[]string{"--url", "http://127.0.0.1:1"}, ExitEnv, "no agent answered at http://127.0.0.1:1"},
		{[]string{"--agent", "/nonexistent.sock"}, ExitUsage, "not a socket"},
	} {
		f, _, _ := topFactory(false)
		cmd := NewCmdReport(f)
		cmd.SetArgs(append([]string{"--agent", "none"}, tt.args...))
		if tt.args[0] == "--agent" {
			cmd.SetArgs(tt.args)
		}
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		err := cmd.Execute()
		if topExitCode(err) != tt.code || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: %v (exit %d), want exit %d mentioning %q", tt.args, err, topExitCode(err), tt.code, tt.want)
		}
	}
}

func timelinePoint(t time.Time, gpu, util int64) timeline.Point {
	return timeline.Point{T: t.UnixMilli(), GPU: gpu, Alloc: -1, Reserved: -1, Util: util}
}
