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

			// Every CUDA sample carries the replayed dictionary the fake
			// handed out for it, field by field; device 1 was never used,
			// so it is neither reported nor asked for mem_get_info (which
			// would create a CUDA context on it).
			var statCalls []fakeCall
			for _, c := range calls {
				if c.Call == "memory_stats" {
					statCalls = append(statCalls, c)
				}
				if c.Call == "mem_get_info" && c.Device != 0 {
					t.Errorf("mem_get_info called for unused device %d", c.Device)
				}
			}
			var cudaMsgs []DeviceStats
			for _, m := range msgs {
				if (m.Type == TypeSample || m.Type == TypeOOM) && len(m.CUDA) > 0 {
					if len(m.CUDA) != 1 || m.CUDA[0].Device != 0 {
						t.Errorf("want device 0 only, got %+v", m.CUDA)
					}
					cudaMsgs = append(cudaMsgs, m.CUDA[0])
				}
			}
			if len(cudaMsgs) < 3 || len(cudaMsgs) > len(statCalls) {
				t.Fatalf("%d CUDA samples for %d memory_stats calls", len(cudaMsgs), len(statCalls))
			}
			// Messages arrive in the order memory_stats was called (one
			// connection; sampler and OOM event share it).
			for i, d := range cudaMsgs {
				st := rec.Samples[statCalls[i].Index].MemoryStats
				mg := rec.Samples[statCalls[i].Index].MemGetInfo
				checks := []struct {
					name string
					got  int64
					key  string
				}{
					{"allocated", d.AllocatedBytes, "allocated_bytes.all.current"},
					{"allocated_peak", d.AllocatedPeakBytes, "allocated_bytes.all.peak"},
					{"reserved", d.ReservedBytes, "reserved_bytes.all.current"},
					{"reserved_peak", d.ReservedPeakBytes, "reserved_bytes.all.peak"},
					{"active", d.ActiveBytes, "active_bytes.all.current"},
					{"inactive_split", d.InactiveSplitBytes, "inactive_split_bytes.all.current"},
					{"inactive_split_peak", d.InactiveSplitPeakBytes, "inactive_split_bytes.all.peak"},
					{"segments", d.Segments, "segment.all.current"},
					{"retries", d.NumAllocRetries, "num_alloc_retries"},
					{"ooms", d.NumOOMs, "num_ooms"},
				}
				for _, c := range checks {
					if c.got != st[c.key] {
						t.Errorf("sample %d %s = %d, recording %s = %d", i, c.name, c.got, c.key, st[c.key])
					}
				}
				if d.RequestedBytes == nil || *d.RequestedBytes != st["requested_bytes.all.current"] {
					t.Errorf("sample %d requested_bytes = %v", i, d.RequestedBytes)
				}
				if d.FreeBytes == nil || *d.FreeBytes != mg[0] || d.TotalBytes == nil || *d.TotalBytes != mg[1] {
					t.Errorf("sample %d mem_get_info = %v/%v, want %v", i, d.FreeBytes, d.TotalBytes, mg)
				}
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
