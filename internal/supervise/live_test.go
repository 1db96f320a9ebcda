package supervise

import (
	"math"
	"testing"

	"github.com/vramguard/vramguard/internal/analyze"
)

// TestLiveAlertsOncePerEpisode feeds a host-memory leak heading for its limit
// and checks the alerts come, and come once.
func TestLiveAlertsOncePerEpisode(t *testing.T) {
	l := newLive(600)
	counts := map[analyze.AlertKind]int{}
	const limit = 64 << 30
	for i := 0; i < 3600; i++ {
		s := analyze.NaNSample(float64(i))
		// 8 GiB base, a sawtooth, and 4 MiB/s that never comes back.
		s.RSS = 8<<30 + float64(i%20)*(64<<20) + float64(i)*(4<<20)
		s.Limit = limit
		for _, a := range l.observe(s) {
			counts[a.Kind]++
			if a.Message == "" {
				t.Error("alert without a message")
			}
		}
	}
	if counts[analyze.AlertLeak] != 1 {
		t.Errorf("leak alerts = %d, want exactly 1 (%v)", counts[analyze.AlertLeak], counts)
	}
}

// TestLiveQuietWhenSteady: a sawtooth with no trend raises nothing.
func TestLiveQuietWhenSteady(t *testing.T) {
	l := newLive(600)
	for i := 0; i < 3600; i++ {
		s := analyze.NaNSample(float64(i))
		s.RSS = 8<<30 + float64(i%20)*(64<<20) + 32<<20*math.Sin(float64(i)/7)
		s.Limit = 64 << 30
		if a := l.observe(s); len(a) > 0 {
			t.Fatalf("alert on a steady job at t=%d: %s", i, a[0].Message)
		}
	}
}
