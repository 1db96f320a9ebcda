package agent

import (
	"context"
	"encoding/json"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/store"
	"github.com/vramguard/vramguard/internal/usage"
)

// gpuJobs: ana's two-GPU job (python3 ddp.py: on GPU 0 a rank at 80% and a
// worker holding 1 GiB at 5%, on GPU 1 a rank growing from 10 to 14 GiB at
// 0%), ben's job on GPU 1 growing from 4 to 10 GiB, busy for 100 s then
// idle, and his job on GPU 0 with no utilisation reading.
const gpuJobs = `{
  "name": "per gpu", "duration": "1h",
  "devices": [{"name": "Test GPU", "uuid": "GPU-test-0", "total": "80GiB"}, {"name": "Test GPU", "uuid": "GPU-test-1", "total": "80GiB"}],
  "processes": [
    {"pid": 965000, "host": {"ppid": 1, "comm": "python3", "cmdline": ["python3", "ddp.py"], "uid": 1301, "user": "ana"}},
    {"pid": 965001, "device": 0, "memory": "30GiB", "sm_util": 80,
     "host": {"ppid": 965000, "comm": "python3", "cmdline": ["python3", "ddp.py", "--rank", "0"], "uid": 1301, "user": "ana"}},
    {"pid": 965003, "device": 0, "memory": "1GiB", "sm_util": 5,
     "host": {"ppid": 965001, "comm": "pt_data_worker", "uid": 1301, "user": "ana"}},
    {"pid": 965002, "device": 1, "memory": [["0s", "10GiB"], ["300s", "14GiB"]], "sm_util": 0,
     "host": {"ppid": 965000, "comm": "python3", "cmdline": ["python3", "ddp.py", "--rank", "1"], "uid": 1301, "user": "ana"}},
    {"pid": 965010, "device": 1, "memory": [["0s", "4GiB"], ["300s", "10GiB"]], "sm_util": [["0s", 50], ["100s", 50], ["100.001s", 0]],
     "host": {"ppid": 1, "comm": "python3", "cmdline": ["python3", "solo.py"], "uid": 1302, "user": "ben"}},
    {"pid": 965020, "device": 0, "memory": "2GiB",
     "host": {"ppid": 1, "comm": "python3", "cmdline": ["python3", "quiet.py"], "uid": 1302, "user": "ben"}}
  ]}`

// TestReportByGPU: --by gpu is one row per GPU, and each row's figures
// equal sums computed here from the driver's records the agent sampled
// (the simulator's process list, read before each sample): memory-hours
// of the memory held on that GPU, the jobs' hours holding memory there,
// busy or idle by the utilisation of their processes there (ana's job is
// busy on GPU 0 and idle on GPU 1), the most one job held there, and the
// death of ana's job in both rows; the total is the rows' sums with ana's
// death once.
func TestReportByGPU(t *testing.T) {
	const n = 300
	r := newRig(t, gpuJobs, Config{})
	ctx := context.Background()
	jobOf := map[int]string{965001: "python3 ddp.py", 965002: "python3 ddp.py", 965003: "python3 ddp.py", 965010: "python3 solo.py", 965020: "python3 quiet.py"}
	type acc struct {
		bytes, util int64
	}
	type want struct {
		jobs                  map[string]bool
		mem, held, busy, idle float64
		peak                  int64
		died                  int
	}
	wants := map[string]*want{}
	const gib, threshold = float64(1 << 30), DefaultIdleThreshold
	start := r.clk.Now()
	for range n {
		recs, err := r.gpus.Processes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// each job's memory and utilisation on each GPU in this sample
		per := map[int]map[string]*acc{}
		for _, p := range recs {
			job, ok := jobOf[p.PID]
			if !ok {
				t.Fatalf("a driver record of pid %d", p.PID)
			}
			if per[p.DeviceIndex] == nil {
				per[p.DeviceIndex] = map[string]*acc{}
			}
			a := per[p.DeviceIndex][job]
			if a == nil {
				a = &acc{util: -1}
				per[p.DeviceIndex][job] = a
			}
			a.bytes += int64(p.UsedBytes)
			if p.SMUtilPercent >= 0 {
				a.util = min(max(a.util, 0)+int64(p.SMUtilPercent), 100)
			}
		}
		const h = 1.0 / 3600 // a sample a second
		for dev, jobs := range per {
			g := strconv.Itoa(dev)
			w := wants[g]
			if w == nil {
				w = &want{jobs: map[string]bool{}}
				wants[g] = w
			}
			for job, a := range jobs {
				w.jobs[job] = true
				w.peak = max(w.peak, a.bytes)
				w.mem += float64(a.bytes) / gib * h
				w.held += h
				switch {
				case a.util < 0:
				case a.util < threshold:
					w.idle += h
				default:
					w.busy += h
				}
			}
		}
		r.step(1)
	}
	var anaKey string
	for _, j := range r.ag.Snapshot().Jobs {
		if j.Name == "python3 ddp.py" {
			anaKey = j.Key
		}
	}
	if err := r.ag.AddEvent(ctx, &store.AgentEvent{JobKey: anaKey, JobName: "python3 ddp.py", Kind: EventDied, T: start.Add(30 * time.Second),
		Message: "process python3 ddp.py died after a CUDA OOM"}); err != nil {
		t.Fatal(err)
	}
	wants["0"].died, wants["1"].died = 1, 1
	if len(wants) != 2 || len(wants["0"].jobs) != 2 || len(wants["1"].jobs) != 2 {
		t.Fatalf("the scenario's records: %+v", wants)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	check := func(t *testing.T, rep usage.Report) {
		t.Helper()
		if len(rep.Rows) != len(wants) {
			b, _ := json.Marshal(rep.Rows)
			t.Fatalf("%d rows, want one per GPU (%d): %s", len(rep.Rows), len(wants), b)
		}
		var sum usage.Row
		for _, row := range rep.Rows {
			w, ok := wants[row.Group]
			if !ok {
				t.Fatalf("a row for %q", row.Group)
			}
			if row.Jobs != len(w.jobs) || !near(row.MemoryGiBHours, w.mem) || !near(row.HeldHours, w.held) || !near(row.BusyHours, w.busy) ||
				!near(row.IdleHours, w.idle) || row.PeakBytes != w.peak || row.Died != w.died {
				t.Errorf("GPU %s: %+v\nwant jobs %d, mem %.9f, held %.9f, busy %.9f, idle %.9f, peak %d, died %d",
					row.Group, row, len(w.jobs), w.mem, w.held, w.busy, w.idle, w.peak, w.died)
			}
			sum.MemoryGiBHours += row.MemoryGiBHours
			sum.HeldHours += row.HeldHours
			sum.BusyHours += row.BusyHours
			sum.IdleHours += row.IdleHours
		}
		tot := rep.Total
		if !near(tot.MemoryGiBHours, sum.MemoryGiBHours) || !near(tot.HeldHours, sum.HeldHours) || !near(tot.BusyHours, sum.BusyHours) ||
			!near(tot.IdleHours, sum.IdleHours) || tot.Jobs != 3 || tot.Died != 1 || tot.PeakBytes != max(wants["0"].peak, wants["1"].peak) {
			t.Errorf("total %+v; the rows add up to %+v, with 3 jobs and 1 death", tot, sum)
		}
	}
	rep, err := r.ag.Report(ctx, usage.ByGPU, start.Add(-time.Second), r.clk.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	check(t, rep)
	// ana's job is busy by its own utilisation, which by GPU is busy on 0
	// and idle on 1
	byJob, err := r.ag.Report(ctx, usage.ByJob, start.Add(-time.Second), r.clk.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range byJob.Rows {
		if row.Group == "python3 ddp.py" && (!near(row.BusyHours, float64(n)/3600) || row.IdleHours != 0) {
			t.Errorf("ana's job by job: %+v, want busy all along", row)
		}
	}
	t.Run("API", func(t *testing.T) {
		code, body := r.do("GET", "/api/v1/report?by=gpu&range=1h", "", "")
		var rep usage.Report
		if err := json.Unmarshal([]byte(body), &rep); code != 200 || err != nil {
			t.Fatalf("GET /api/v1/report?by=gpu: %d %v %s", code, err, body)
		}
		check(t, rep)
	})
}

// TestReportByGPUOldRows: samples stored before the agent kept per-GPU
// readings (a version 2 block, as an older agent wrote it) count by GPU
// split evenly over the GPUs the job's record names, at the job's
// utilisation; a job that held no memory is under "-".
func TestReportByGPUOldRows(t *testing.T) {
	r := newRig(t, idleJobs, Config{})
	ctx := context.Background()
	t0 := r.clk.Now().Add(-10 * time.Minute).Truncate(time.Minute)
	add := func(key, name string, devices []int, gpu, util int64, n int) {
		info, _ := json.Marshal(map[string]any{"labels": Labels{Job: name, Kind: "process", User: "cy", UID: 1400}, "devices": devices})
		id, err := r.st.UpsertAgentJob(ctx, &store.AgentJob{Key: key, Kind: "process", Name: name, Info: info, FirstSeen: t0, LastSeen: t0.Add(time.Duration(n) * time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		var ps []Point
		for i := range n {
			ps = append(ps, Point{T: t0.Add(time.Duration(i) * time.Second).UnixMilli(), GPU: gpu, Alloc: -1, Reserved: -1, Util: util})
		}
		if err := r.st.AddAgentBlocks(ctx, []store.AgentBlock{{Job: id, Res: ResFine, T0: t0, T1: t0.Add(time.Duration(n-1) * time.Second), N: n, Data: oldBlock(2, ps)}}); err != nil {
			t.Fatal(err)
		}
	}
	const n = 50
	add("pid:7:1", "python3 old.py", []int{0, 2}, 8<<30, 30, n)
	add("pid:8:1", "python3 host.py", nil, 0, -1, n)
	keep := func(j JobView) bool { return j.User == "cy" }
	rep, err := r.ag.Report(ctx, usage.ByGPU, t0.Add(-time.Minute), r.clk.Now(), keep)
	if err != nil {
		t.Fatal(err)
	}
	h := float64(n) / 3600
	want := map[string]usage.Row{
		"0": {Group: "0", Jobs: 1, MemoryGiBHours: 4 * h, HeldHours: h, BusyHours: h, PeakBytes: 4 << 30, DiedWhy: []string{}},
		"2": {Group: "2", Jobs: 1, MemoryGiBHours: 4 * h, HeldHours: h, BusyHours: h, PeakBytes: 4 << 30, DiedWhy: []string{}},
		"-": {Group: "-", Jobs: 1, DiedWhy: []string{}},
	}
	if len(rep.Rows) != len(want) {
		t.Fatalf("rows %+v, want %d", rep.Rows, len(want))
	}
	for _, row := range rep.Rows {
		w := want[row.Group]
		if row.Jobs != w.Jobs || math.Abs(row.MemoryGiBHours-w.MemoryGiBHours) > 1e-9 || math.Abs(row.HeldHours-w.HeldHours) > 1e-9 ||
			math.Abs(row.BusyHours-w.BusyHours) > 1e-9 || row.IdleHours != 0 || row.PeakBytes != w.PeakBytes {
			t.Errorf("GPU %s: %+v, want %+v", row.Group, row, w)
		}
	}
}
