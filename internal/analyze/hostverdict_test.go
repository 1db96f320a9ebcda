package analyze

import (
	"strings"
	"testing"
)

// TestHostSeriesVerdict: a job without GPU series (a CPU job) is judged on
// the series it has, its host memory: never by the count of GPU windows it
// cannot have. The 454 s case is the CPU job whose host memory rose
// linearly for 7.5 minutes until its cgroup killed it.
func TestHostSeriesVerdict(t *testing.T) {
	tests := []struct {
		name     string
		dur      float64
		rate     float64 // MiB/s
		verdict  Verdict
		evidence string
	}{
		{"too short to judge", 150, 0.9, VerdictInsufficientData, "host memory (rss): need 10 windows of at least 30s and 8 samples to judge a leak; have 4 over 150 samples"},
		{"rising for 7.5 minutes to its limit", 454, 0.9, VerdictInsufficientData, "host resident memory (rss) floor rises 922 KiB/s since t=0s"},
		{"rising for 15 minutes", 900, 0.9, VerdictLeak, "host resident memory (floor per window) rose"},
		{"flat for 10 minutes", 600, 0, VerdictStable, "host resident memory (rss) floor (the level each window returns to) shows no persistent rise"},
		// resident memory can stand above the cgroup's limit (shared file
		// pages it is not charged for): no "out of memory in 0s (0s to 0s)"
		{"already past its limit", 600, 0.9, VerdictLeak, "at or past its limit of 512 MiB: no time left at this rate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := NewDetector(DefaultConfig())
			for x := 0.0; x < tt.dur; x++ {
				s := NaNSample(x)
				s.RSS = 60*mib + tt.rate*mib*x + float64(int(x*7)%5)*mib/8
				s.Limit = 512 * mib
				d.Add(s)
			}
			r := d.Report()
			ev := strings.Join(r.Evidence, "\n")
			if r.Verdict != tt.verdict || r.Series != SeriesRSS || !strings.Contains(ev, tt.evidence) || strings.Contains(ev, "have 0") {
				t.Errorf("%s on %q, want %s on rss with %q:\n%s", r.Verdict, r.Series, tt.verdict, tt.evidence, ev)
			}
		})
	}
}
