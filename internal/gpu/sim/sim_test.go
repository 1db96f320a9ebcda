package sim

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/gpu"
	"github.com/vramguard/vramguard/internal/gpu/gputest"
	"github.com/vramguard/vramguard/internal/procfs"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// parse is Parse of a scenario's text with the process's environment; an
// error fails the test.
func parse(t *testing.T, text string) *Scenario {
	t.Helper()
	sc, err := Parse([]byte(text), os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// processesAt is a backend on sc made at gputest.RefTime, its clock then
// moved on by at, and what its Processes reports there; an error fails the
// test.
func processesAt(t *testing.T, sc *Scenario, at time.Duration) (*Backend, []gpu.Process) {
	t.Helper()
	c := &clock{t: gputest.RefTime}
	b := New(sc, WithClock(c.now))
	c.t = c.t.Add(at)
	procs, err := b.Processes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return b, procs
}

func TestConformance(t *testing.T) {
	gputest.Run(t, func(t *testing.T) gputest.Fixture {
		b, err := Open("testdata/reference.json", WithClock(func() time.Time { return gputest.RefTime }))
		if err != nil {
			t.Fatal(err)
		}
		return gputest.Reference(b)
	})
}

func TestShippedScenariosLoad(t *testing.T) {
	files, err := filepath.Glob("../../../examples/scenarios/*.json")
	if err != nil || len(files) < 3 {
		t.Fatalf("want at least 3 shipped scenarios, found %d (%v)", len(files), err)
	}
	t.Setenv("VRAMGUARD_SIM_PID", "4242")
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			b, err := Open(f)
			if err != nil {
				t.Fatal(err)
			}
			devs, err := b.Devices(context.Background())
			if err != nil || len(devs) == 0 {
				t.Fatalf("devices: %v, %d", err, len(devs))
			}
			if err := gputest.CheckDevices(devs); err != nil {
				t.Error(err)
			}
			procs, err := b.Processes(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if err := gputest.CheckProcesses(devs, procs); err != nil {
				t.Error(err)
			}
		})
	}
}

const timeline = `{
  "name": "timeline", "duration": "100s", "loop": %LOOP%,
  "devices": [{"name": "G", "total": "10GiB"}],
  "processes": [
    {"pid": 10, "device": 0, "memory": [["0s", "0"], ["10s", "1GiB"], ["20s", "3GiB"]]},
    {"pid": 11, "device": 0, "start": "30s", "end": "60s", "memory": "2GiB"}
  ]
}`

func TestTimeline(t *testing.T) {
	tests := []struct {
		name string
		loop bool
		at   time.Duration
		want map[int]uint64
	}{
		{"start", false, 0, map[int]uint64{10: 0}},
		{"ramp half way", false, 5 * time.Second, map[int]uint64{10: 512 << 20}},
		{"second segment", false, 15 * time.Second, map[int]uint64{10: 2 << 30}},
		{"holds last value", false, 25 * time.Second, map[int]uint64{10: 3 << 30}},
		{"spawned", false, 30 * time.Second, map[int]uint64{10: 3 << 30, 11: 2 << 30}},
		{"exited", false, 60 * time.Second, map[int]uint64{10: 3 << 30}},
		{"holds at end without loop", false, 135 * time.Second, map[int]uint64{10: 3 << 30}},
		{"wraps with loop", true, 135 * time.Second, map[int]uint64{10: 3 << 30, 11: 2 << 30}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			loop := "false"
			if tt.loop {
				loop = "true"
			}
			b, procs := processesAt(t, parse(t, strings.ReplaceAll(timeline, "%LOOP%", loop)), tt.at)
			got := map[int]uint64{}
			var sum uint64
			for _, p := range procs {
				got[p.PID] = p.UsedBytes
				sum += p.UsedBytes
			}
			if len(got) != len(tt.want) {
				t.Fatalf("processes %v, want %v", got, tt.want)
			}
			for pid, w := range tt.want {
				if got[pid] != w {
					t.Errorf("pid %d: %d bytes, want %d", pid, got[pid], w)
				}
			}
			devs, _ := b.Devices(context.Background())
			if devs[0].UsedBytes != sum {
				t.Errorf("device used %d, want the processes' sum %d", devs[0].UsedBytes, sum)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	env := func(k string) string {
		if k == "GOOD" {
			return "77"
		}
		if k == "BAD" {
			return "x"
		}
		return ""
	}
	tests := []struct {
		name, json, want string
	}{
		{"unknown field", `{"devices":[{"name":"g","total":"1GiB"}],"procs":[]}`, "unknown field"},
		{"no total", `{"devices":[{"name":"g"}]}`, "total memory missing"},
		{"device out of range", `{"devices":[{"name":"g","total":"1GiB"}],"processes":[{"pid":1,"device":3,"memory":"1"}]}`, "device 3 out of range"},
		{"bad size", `{"devices":[{"name":"g","total":"1XB"}]}`, "unknown unit"},
		{"env unset", `{"devices":[{"name":"g","total":"1GiB"}],"processes":[{"pid":"$NOPE","device":0}]}`, "NOPE is not set"},
		{"env not a pid", `{"devices":[{"name":"g","total":"1GiB"}],"processes":[{"pid":"${BAD}","device":0}]}`, "is not a PID"},
		{"zero pid not raw", `{"devices":[{"name":"g","total":"1GiB"}],"processes":[{"pid":0,"device":0}]}`, "must be positive"},
		{"host without comm", `{"devices":[{"name":"g","total":"1GiB"}],"processes":[{"pid":5,"host":{}}]}`, "host.comm missing"},
		{"util above 100", `{"devices":[{"name":"g","total":"1GiB"}],"processes":[{"pid":5,"device":0,"sm_util":[["0s",50],["9s",140]]}]}`, "sm_util above 100%"},
		{"end before start", `{"devices":[{"name":"g","total":"1GiB"}],"processes":[{"pid":5,"device":0,"start":"9s","end":"2s"}]}`, "end before start"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.json), env)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tt.want)
			}
		})
	}
	sc, err := Parse([]byte(`{"devices":[{"name":"g","total":"1GiB"}],"processes":[{"pid":"${GOOD}","device":0}]}`), env)
	if err != nil || sc.Processes[0].PID.N != 77 {
		t.Fatalf("env pid: %v %+v", err, sc)
	}
}

const scripted = `{
  "name": "shared", "duration": "1h",
  "devices": [{"name": "G", "total": "80GiB"}],
  "processes": [
    {"pid": 20, "device": 0, "memory": "20GiB", "sm_util": [["0s", 80], ["10m", 80], ["20m", 0]],
     "host": {"comm": "python3", "uid": 1001, "user": "alice"}},
    {"pid": 21, "device": 0, "start": "5m", "memory": "4GiB", "sm_util": 30,
     "host": {"comm": "python3", "uid": 1002}}
  ]
}`

// TestScriptedUtilisation: a process's SM utilisation follows its curve
// (relative to its start), and the device's is the sum of its processes'.
func TestScriptedUtilisation(t *testing.T) {
	sc := parse(t, scripted)
	tests := []struct {
		at      time.Duration
		pid20   int
		pid21   int // -2: not running
		devUtil int
	}{
		{0, 80, -2, 80},
		{5 * time.Minute, 80, 30, 100}, // the sum is capped at 100
		{15 * time.Minute, 40, 30, 70}, // half way down the ramp
		{30 * time.Minute, 0, 30, 30},  // holds its last point
		{59 * time.Minute, 0, 30, 30},
	}
	for _, tt := range tests {
		b, procs := processesAt(t, sc, tt.at)
		got := map[int]int{21: -2}
		for _, p := range procs {
			got[p.PID] = p.SMUtilPercent
		}
		if got[20] != tt.pid20 || got[21] != tt.pid21 {
			t.Errorf("at %v: util %v, want 20:%d 21:%d", tt.at, got, tt.pid20, tt.pid21)
		}
		devs, _ := b.Devices(context.Background())
		if devs[0].UtilPercent != tt.devUtil {
			t.Errorf("at %v: device util %d, want %d", tt.at, devs[0].UtilPercent, tt.devUtil)
		}
	}
}

// TestScriptedOwners: the overlay reports each made-up process's UID, and
// names the UIDs the scenario names (only those).
func TestScriptedOwners(t *testing.T) {
	sc := parse(t, scripted)
	c := &clock{t: gputest.RefTime}
	h := New(sc, WithClock(c.now)).Host(procfs.FS{Root: t.TempDir()})
	c.t = c.t.Add(6 * time.Minute)
	for pid, uid := range map[int]int{20: 1001, 21: 1002} {
		st, err := h.Status(pid)
		if err != nil || st.UID != uid {
			t.Errorf("Status(%d) = uid %d, %v; want %d", pid, st.UID, err, uid)
		}
	}
	if n, ok := h.UserName(1001); !ok || n != "alice" {
		t.Errorf("UserName(1001) = %q, %v", n, ok)
	}
	if n, ok := h.UserName(1002); ok {
		t.Errorf("UserName(1002) = %q, want none (the scenario does not name it)", n)
	}
}

func TestNoneConformance(t *testing.T) {
	gputest.Run(t, func(t *testing.T) gputest.Fixture {
		return gputest.Fixture{Backend: gpu.None{}, StatelessClose: true}
	})
}
