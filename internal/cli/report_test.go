package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/timeline"
	"github.com/vramguard/vramguard/internal/usage"
)

// fakeReportAgent answers GET /api/v1/report with the accounting usage
// computes from two users' samples, and records the query it got.
func fakeReportAgent(t *testing.T, got *string) *httptest.Server {
	t.Helper()
	from := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	pts := func(n int, gib int64, util int64) []usage.Series {
		var ps []usage.Series
		s := usage.Series{Step: time.Minute}
		for i := range n {
			s.Points = append(s.Points, timelinePoint(from.Add(time.Duration(i)*time.Minute), gib<<30, util))
		}
		return append(ps, s)
	}
	jobs := []usage.Job{
		{Key: "notebook:a", Name: "kernel 5e7c2a91", User: "ana", GPUs: "0", Series: pts(120, 20, 0)},
		{Key: "pid:1:2", Name: "python3 train.py", User: "ben", GPUs: "1,2", Series: pts(60, 40, 90), Died: []string{"process python3 train.py died after a CUDA OOM"}},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		*got = r.URL.RequestURI()
		by := r.URL.Query().Get("by")
		json.NewEncoder(w).Encode(usage.Compute(jobs, by, 1, from, from.Add(7*24*time.Hour)))
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
