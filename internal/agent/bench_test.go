package agent

import (
	"context"
	"os"
	"testing"
	"time"
)

// BenchmarkSampleAndIngest: one 1 Hz tick of serve with 8 GPUs and 200
// processes (bench/serve/eight-gpus.json): the shared sampler's refresh
// (driver, /proc, attribution) and the agent's ingest, reported apart.
func BenchmarkSampleAndIngest(b *testing.B) {
	sc, err := os.ReadFile("../../bench/serve/eight-gpus.json")
	if err != nil {
		b.Fatal(err)
	}
	r := newRig(b, string(sc), Config{})
	ctx := context.Background()
	var refresh, ingest time.Duration
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		s, err := r.smp.Refresh(ctx)
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		r.ag.Ingest(ctx, s)
		ingest += time.Since(t1)
		refresh += t1.Sub(t0)
		r.clk.Add(time.Second)
	}
	b.ReportMetric(float64(refresh.Microseconds())/float64(b.N), "refresh-µs/op")
	b.ReportMetric(float64(ingest.Microseconds())/float64(b.N), "ingest-µs/op")
}
