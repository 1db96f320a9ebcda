package probe

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type recording struct {
	DeviceCount int `json:"device_count"`
	Samples     []struct {
		MemoryStats map[string]int64 `json:"memory_stats"`
		MemGetInfo  [2]int64         `json:"mem_get_info"`
	} `json:"samples"`
}

type fakeCall struct {
	Call       string `json:"call"`
	Device     int    `json:"device"`
	Index      int    `json:"index"`
	Stacks     string `json:"stacks"`
	MaxEntries int64  `json:"max_entries"`
}

func readFakeLog(t *testing.T, path string) []fakeCall {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []fakeCall
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var c fakeCall
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	return out
}

// The CUDA path, through a fake torch.cuda that replays recorded
// memory_stats() dictionaries (testdata/memory_stats): sample fields, the
// OOM observer and its exception-hook fallback, memory_summary and the
// bounded-history snapshot, read back by TopAllocationSites.
func TestFakeCUDA(t *testing.T) {
	t.Parallel()
	var rec recording
	b, err := os.ReadFile(testdata(t, "memory_stats/h100_finetune.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		mode     string
		code     int
		source   string
		snapshot bool
	}{
		{mode: "excepthook", code: 1, source: "excepthook", snapshot: true},
		{mode: "observer", code: 0, source: "observer", snapshot: false},
	}
	for _, tc := range cases {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			l := listen(t)
			runDir := t.TempDir()
			log := filepath.Join(t.TempDir(), "fake.log")
			env := Env(baseEnv("MODE="+tc.mode, "FAKECUDA_LOG="+log), probeDir(t),
				Options{Socket: l.Path(), Hz: 20, RunDir: runDir, OOMSnapshot: tc.snapshot})
			r := runPython(t, env, nil, testdata(t, "scripts/cuda_fake.py"))
			if r.code != tc.code {
				t.Fatalf("exit %d, want %d\nstderr:\n%s", r.code, tc.code, r.stderr)
			}
			msgs := collect(t, l, r.pid)
			if e := byType(msgs, 0, TypeError); len(e) > 0 {
				t.Errorf("probe reported internal errors: %+v", e)
			}
			calls := readFakeLog(t, log)

			// Every CUDA sample carries, field by field, one of the replayed
			// dictionaries the fake handed out (sampler and OOM handler may
			// interleave, so not necessarily in order); device 1 was never
			// used, so it is neither reported nor asked for mem_get_info
			// (which would create a CUDA context on it).
			handed := map[int]bool{}
			for _, c := range calls {
				if c.Call == "memory_stats" {
					handed[c.Index] = true
				}
				if c.Call == "mem_get_info" && c.Device != 0 {
					t.Errorf("mem_get_info called for unused device %d", c.Device)
				}
			}
			rows := map[int]bool{}
			for _, m := range msgs {
				if (m.Type != TypeSample && m.Type != TypeOOM) || len(m.CUDA) == 0 {
					continue
				}
				if len(m.CUDA) != 1 || m.CUDA[0].Device != 0 {
					t.Errorf("want device 0 only, got %+v", m.CUDA)
					continue
				}
				k := matchRow(rec, m.CUDA[0])
				if k < 0 || !handed[k] {
					b, _ := json.Marshal(m.CUDA[0])
					t.Errorf("%s message carries stats that match no replayed row handed out (%d): %s", m.Type, k, b)
				}
				rows[k] = true
			}
			if len(rows) < 3 {
				t.Errorf("CUDA stats from %d distinct replayed rows, want >= 3", len(rows))
			}

			ooms := byType(msgs, r.pid, TypeOOM)
			if len(ooms) != 1 {
				dumpMessages(t, msgs)
				t.Fatalf("want 1 oom event, got %d", len(ooms))
			}
			o := ooms[0]
			if o.Source != tc.source || o.Device == nil || *o.Device != 0 || o.AllocBytes == nil || *o.AllocBytes != 2<<30 {
				t.Errorf("oom event: %+v", o)
			}
			if tc.source == "observer" && (o.FreeBytes == nil || o.LimitBytes == nil) {
				t.Errorf("observer oom lacks free/limit bytes: %+v", o)
			}
			summary, err := os.ReadFile(o.SummaryPath)
			if err != nil || !strings.Contains(string(summary), "PyTorch CUDA memory summary") || filepath.Dir(o.SummaryPath) != runDir {
				t.Errorf("memory summary at %q: %v %q", o.SummaryPath, err, summary)
			}

			var history []fakeCall
			for _, c := range calls {
				if c.Call == "_record_memory_history" {
					history = append(history, c)
				}
			}
			if !tc.snapshot {
				if len(history) != 0 || o.SnapshotPath != "" {
					t.Errorf("history recorded without --oom-snapshot: %v %q", history, o.SnapshotPath)
				}
			} else {
				if len(history) != 1 || history[0].MaxEntries != 100000 || history[0].Stacks != "python" {
					t.Errorf("_record_memory_history calls: %+v (want one, bounded max_entries, python stacks)", history)
				}
				sites, err := TopAllocationSites(o.SnapshotPath, 3)
				if err != nil {
					t.Fatal(err)
				}
				if len(sites) != 3 || sites[0].File != "/home/user/model.py" || sites[0].Line != 63 || sites[0].Bytes != 24<<30 {
					t.Errorf("sites from the dumped snapshot: %+v", sites)
				}
			}

			switch tc.mode {
			case "excepthook":
				// The job's own traceback still reaches stderr, unchanged.
				if !strings.HasSuffix(string(r.stderr), "fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF\n") ||
					!strings.Contains(string(r.stderr), "Traceback (most recent call last):") {
					t.Errorf("stderr:\n%s", r.stderr)
				}
			case "observer":
				if !strings.Contains(string(r.stdout), "caught OOM") || len(r.stderr) != 0 {
					t.Errorf("stdout %q stderr %q", r.stdout, r.stderr)
				}
			}
			var s Summary
			for _, m := range msgs {
				s.Add(m)
			}
			if s.PeakAllocatedBytes == nil || s.PeakReservedBytes == nil || s.OOM == nil || s.OOM.Count != 1 || s.OptimizerSteps != 3 {
				t.Errorf("summary: %+v", s)
			}
		})
	}
}

// matchRow returns the index of the recorded row whose memory_stats and
// mem_get_info the device stats reproduce exactly, or -1.
func matchRow(rec recording, d DeviceStats) int {
	for k, row := range rec.Samples {
		st, mg := row.MemoryStats, row.MemGetInfo
		ok := d.AllocatedBytes == st["allocated_bytes.all.current"] &&
			d.AllocatedPeakBytes == st["allocated_bytes.all.peak"] &&
			d.ReservedBytes == st["reserved_bytes.all.current"] &&
			d.ReservedPeakBytes == st["reserved_bytes.all.peak"] &&
			d.ActiveBytes == st["active_bytes.all.current"] &&
			d.ActivePeakBytes == st["active_bytes.all.peak"] &&
			d.InactiveSplitBytes == st["inactive_split_bytes.all.current"] &&
			d.InactiveSplitPeakBytes == st["inactive_split_bytes.all.peak"] &&
			d.Segments == st["segment.all.current"] &&
			d.NumAllocRetries == st["num_alloc_retries"] &&
			d.NumOOMs == st["num_ooms"] &&
			d.RequestedBytes != nil && *d.RequestedBytes == st["requested_bytes.all.current"] &&
			d.RequestedPeakBytes != nil && *d.RequestedPeakBytes == st["requested_bytes.all.peak"] &&
			d.FreeBytes != nil && *d.FreeBytes == mg[0] &&
			d.TotalBytes != nil && *d.TotalBytes == mg[1]
		if ok {
			return k
		}
	}
	return -1
}
