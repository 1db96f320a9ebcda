package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/vramguard/vramguard/internal/store"
	"github.com/vramguard/vramguard/internal/timeline"
)

// Synthesize writes span of 1 Hz samples ending at end for n made-up jobs
// straight through the timeline layer (as the agent would have written
// them), with each job recorded as seen until end. It exists for the scale
// test and the dashboard benchmark (bench/serve), which need a day of data
// without waiting a day.
//
// Each job looks like a training job on one GPU seen through NVML and the
// probe (its per-GPU reading is its total): the driver's figure moves in 2 MiB steps every few seconds, host RSS changes
// by pages every second, and (for every other job, the ones "with a probe")
// allocated memory swings with each training step and reserved follows the
// allocator's segments.
func Synthesize(ctx context.Context, st *store.Store, ret Retention, n int, span time.Duration, end time.Time) error {
	tl := NewTimelines(st, ret)
	start := end.Add(-span).Truncate(time.Second)
	ids := make([]int64, n)
	type gen struct {
		gpu, rss, res int64
		probe         bool
		r             *rand.Rand
	}
	gens := make([]gen, n)
	for i := range n {
		info, _ := json.Marshal(map[string]any{"labels": Labels{Job: fmt.Sprintf("train-%02d", i), Kind: "process"}, "devices": []int{i % 8}, "limit_bytes": int64(80 << 30)})
		id, err := st.UpsertAgentJob(ctx, &store.AgentJob{Key: fmt.Sprintf("synth:%02d", i), Kind: "process",
			Name: fmt.Sprintf("train-%02d", i), Info: info, FirstSeen: start, LastSeen: end})
		if err != nil {
			return err
		}
		ids[i] = id
		gens[i] = gen{gpu: int64(10+i%50) << 30, rss: int64(2+i%6) << 30, res: int64(8+i%40) << 30, probe: i%2 == 0, r: rand.New(rand.NewPCG(uint64(i), 7))}
	}
	for s := int64(0); s <= int64(span/time.Second); s++ {
		t := start.Add(time.Duration(s) * time.Second).UnixMilli()
		for i := range gens {
			g := &gens[i]
			if g.r.IntN(8) == 0 {
				g.gpu += int64(g.r.IntN(3)-1) * 2 << 20
			}
			g.rss += int64(g.r.IntN(33)-16) * 4096
			p := Point{T: t, GPU: g.gpu, RSS: g.rss, Alloc: -1, Reserved: -1, Util: -1,
				GPUs: []timeline.DevicePoint{{Index: i % 8, Bytes: g.gpu, Util: -1}}}
			if g.probe {
				if g.r.IntN(20) == 0 {
					g.res += int64(g.r.IntN(3)-1) * 20 << 20
				}
				p.Reserved = g.res
				p.Alloc = g.res - int64(g.r.IntN(1<<10))<<20
			}
			tl.Add(ids[i], p)
		}
		if s%60 == 59 {
			if err := tl.Flush(ctx); err != nil {
				return err
			}
		}
	}
	return tl.Close(ctx)
}
