package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/charmbracelet/x/ansi"
	"github.com/muesli/termenv"

	"github.com/vramguard/vramguard/internal/attrib"
	"github.com/vramguard/vramguard/internal/gpu"
	"github.com/vramguard/vramguard/internal/gpu/sim"
	"github.com/vramguard/vramguard/internal/monitor"
	"github.com/vramguard/vramguard/internal/procfs"
	"github.com/vramguard/vramguard/internal/sampler"
	"github.com/vramguard/vramguard/internal/timeline"
)

// topScenario is the machine of top's golden screens (see its description).
const topScenario = "testdata/top/scenario.json"

// topPodUID is the pod of topScenario; topProcRoot names it.
const topPodUID = "6f1c2b3a-4d5e-4f60-8a7b-9c0d1e2f3a4b"

// topProcRoot makes a fixture root: an empty proc/ (only the scenario's
// processes exist) and a kubelet pod log directory naming the pod.
func topProcRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"proc", filepath.Join(attrib.DefaultPodLogDir, "ml-team_llama-train-0_"+topPodUID)} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// topClock is a clock tests move by hand.
type topClock struct{ t time.Time }

func (c *topClock) now() time.Time { return c.t }

// topTestReading is the first reading of topScenario over topProcRoot
// (at the scenario's start, 2025-03-01 12:00 UTC) and the sampler that
// took it.
func topTestReading(t *testing.T) (*sampler.Sampler, sampler.Reading) {
	t.Helper()
	c := &topClock{t: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)}
	s := topTestSampler(t, topScenario, topProcRoot(t), c)
	smp, err := s.Refresh(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s, smp
}

// topTestSampler plays scenario on c's clock, as top does.
func topTestSampler(t *testing.T, scenario, root string, c *topClock) *sampler.Sampler {
	t.Helper()
	sc, err := sim.Load(scenario)
	if err != nil {
		t.Fatal(err)
	}
	b := sim.New(sc, sim.WithClock(c.now))
	s, err := sampler.New(sampler.Config{
		Backend:    b,
		Attributor: &attrib.Attributor{Src: b.Host(procfs.FS{Root: root}), Pods: attrib.NewPodIndex(attrib.PodLogDir(root))},
		Now:        c.now,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// plainStyles draws without any escape sequence.
func plainStyles() *topStyles {
	r, _ := topRenderer(&bytes.Buffer{}, func(string) string { return "" })
	return newTopStyles(r, false)
}

func topTestScreen(t *testing.T, smp *sampler.Reading, width int, group bool) *topScreen {
	t.Helper()
	sc := &topScreen{st: plainStyles(), width: width, smp: smp, group: group, cursor: -1}
	for _, j := range arrangeJobs(smp.Attrib.Jobs, "gpu", "", group) {
		sc.rows = append(sc.rows, topRow{job: &j})
	}
	return sc
}

func screenText(sc *topScreen) []string {
	lines := sc.deviceLines()
	head, body, _ := sc.table()
	return append(append(lines, head), body...)
}

// TestTopTableFitsWidth: at every width no line is wider than the
// terminal, every figure is whole, the columns that leave are always the
// first ones of the stated drop order, and at 200 columns all of them show.
func TestTopTableFitsWidth(t *testing.T) {
	s, smp := topTestReading(t)
	figures := []string{"64.0 GiB", "36.0 GiB", "12.0 GiB", "6.0 GiB", "13.6 GiB", "9.0 GiB", "700.0 MiB",
		"68.5 GiB / 80.0 GiB", "86%", "util 92%", "judging…"}
	prevShown := len(topColHeads) + 1
	for _, width := range []int{200, 160, 140, 120, 100, 90, 80, 70, 60} {
		sc := topTestScreen(t, &smp, width, false)
		sc.history = s.History
		lines := screenText(sc)
		text := strings.Join(lines, "\n")
		for _, l := range lines {
			if w := cellWidth(l); w > width {
				t.Errorf("width %d: a line of %d cells: %q", width, w, l)
			}
		}
		for _, f := range figures {
			if width >= 80 && !strings.Contains(text, f) {
				t.Errorf("width %d: %q is missing or cut:\n%s", width, f, text)
			}
		}
		head, _, _ := sc.table()
		var dropped []topCol
		for c := range numTopCols {
			if !strings.Contains(head, topColHeads[c]) {
				dropped = append(dropped, c)
			}
		}
		for _, c := range dropped {
			if !slices.Contains(topDropOrder[:len(dropped)], c) {
				t.Errorf("width %d: dropped %v, want the first %d of %s", width, dropped, len(dropped), topDropNames)
			}
		}
		if shown := int(numTopCols) - len(dropped); shown > prevShown {
			t.Errorf("width %d shows more columns (%d) than a wider screen (%d)", width, shown, prevShown)
		} else {
			prevShown = shown
		}
		switch width {
		case 200:
			if len(dropped) > 0 {
				t.Errorf("at 200 columns everything should show; dropped %v:\n%s", dropped, text)
			}
		case 80:
			if len(dropped) == 0 || len(dropped) == len(topDropOrder) {
				t.Errorf("at 80 columns dropped %v", dropped)
			}
			if !strings.Contains(text, "[█") || strings.Contains(text, strings.Repeat("█", devBarMax)) {
				t.Errorf("at 80 columns the memory bars should shrink:\n%s", text)
			}
		}
	}
}

// TestTopOnceFitsColumns: --once fits $COLUMNS when it prints to a pipe,
// and prints everything when nothing says how wide.
func TestTopOnceFitsColumns(t *testing.T) {
	root := topProcRoot(t)
	for _, cols := range []string{"80", ""} {
		f, out, _ := topFactory(false)
		f.Getenv = func(k string) string {
			if k == "COLUMNS" {
				return cols
			}
			return ""
		}
		cmd := NewCmdTop(f)
		cmd.SetArgs([]string{"--once", "--simulate", topScenario, "--proc-root", root})
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		if err := cmd.Execute(); err != nil {
			t.Fatal(err)
		}
		text := out.String()
		if strings.Contains(text, "\x1b[") {
			t.Errorf("COLUMNS=%q: escape sequences in output to a pipe:\n%q", cols, text)
		}
		widest := 0
		for _, l := range strings.Split(text, "\n") {
			widest = max(widest, cellWidth(l))
		}
		if cols == "80" && widest > 80 {
			t.Errorf("COLUMNS=80: a line of %d cells:\n%s", widest, text)
		}
		if cols == "" && (widest <= 80 || !strings.Contains(text, "ALLOC / RESERVED") || !strings.Contains(text, "OWNER")) {
			t.Errorf("no width given: want every column, widest line %d:\n%s", widest, text)
		}
		// the pod by namespace/name, the orphan by its whole command line
		if !strings.Contains(text, "ml-team/llama-train-0") {
			t.Errorf("COLUMNS=%q: the pod is not named:\n%s", cols, text)
		}
		if !strings.Contains(strings.Join(strings.Fields(text), " "),
			"command: /usr/bin/python3 -c 'from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5, pipe_handle=7)' --multiprocessing-fork") {
			t.Errorf("COLUMNS=%q: the orphan's command line is not shown whole:\n%s", cols, text)
		}
	}
}

func TestGPULabel(t *testing.T) {
	devs := map[string]gpu.Device{}
	for i := range 8 {
		u := "GPU-" + string(rune('a'+i))
		devs[u] = gpu.Device{Index: i, UUID: u}
	}
	devs["MIG-0"] = gpu.Device{Index: 7, UUID: "MIG-0", ParentUUID: "GPU-h", MIGIndex: 0}
	devs["MIG-1"] = gpu.Device{Index: 7, UUID: "MIG-1", ParentUUID: "GPU-h", MIGIndex: 1}
	on := func(uuids ...string) []attrib.Process {
		var ps []attrib.Process
		for _, u := range uuids {
			ps = append(ps, attrib.Process{GPU: []gpu.Process{{DeviceIndex: devs[u].Index, DeviceUUID: u}}})
		}
		return ps
	}
	for _, tc := range []struct {
		procs []attrib.Process
		want  string
	}{
		{nil, "-"},
		{on("GPU-b"), "1"},
		{on("GPU-b", "GPU-a"), "0,1"},
		{on("GPU-a", "GPU-b", "GPU-c", "GPU-d", "GPU-f"), "0-3,5"},
		{on("MIG-1"), "7:1"},
		{on("GPU-a", "MIG-0", "MIG-1", "MIG-1"), "0,7:0,7:1"},
	} {
		if got := gpuLabel(tc.procs, devs); got != tc.want {
			t.Errorf("gpuLabel = %q, want %q", got, tc.want)
		}
	}
}

// TestTopGPUColumnMIG: a job on a MIG instance shows GPU:INSTANCE in its
// row, and the device list names the instance the same way.
func TestTopGPUColumnMIG(t *testing.T) {
	_, smp := topTestReading(t)
	lines := screenText(topTestScreen(t, &smp, 120, false))
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`^2:0 +945001 +bob +python infer_a\.py`),
		regexp.MustCompile(`^2:1 +945002 +carol\.with\.… +python infer_b\.py`),
		regexp.MustCompile(`^0,1 +940000 +root +ml-team/llama-train-0`),
		regexp.MustCompile(`^GPU 2:1 +NVIDIA A100 MIG 3g\.40gb`),
	} {
		if !slices.ContainsFunc(lines, want.MatchString) {
			t.Errorf("no line matches %s:\n%s", want, strings.Join(lines, "\n"))
		}
	}
}

// TestTopFlagsJudging: FLAGS says judging… until the leak detector has
// enough samples, then its verdict: stable for a flat job, leak for one
// whose memory keeps rising.
func TestTopFlagsJudging(t *testing.T) {
	dir := t.TempDir()
	scen := filepath.Join(dir, "scenario.json")
	if err := os.WriteFile(scen, []byte(`{
  "devices": [{"name": "NVIDIA H100 80GB HBM3", "total": "80GiB", "util": 50}],
  "processes": [
    {"pid": 960001, "device": 0, "memory": "20GiB", "host": {"ppid": 1, "comm": "python3", "cmdline": ["python3", "flat.py"]}},
    {"pid": 960002, "device": 0, "memory": [["0s", "8GiB"], ["20m", "56GiB"]], "host": {"ppid": 1, "comm": "python3", "cmdline": ["python3", "leaky.py"]}}
  ]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "proc"), 0o755); err != nil {
		t.Fatal(err)
	}
	c := &topClock{t: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)}
	s := topTestSampler(t, scen, dir, c)
	flags := func(smp *sampler.Reading) map[string]string {
		out := map[string]string{}
		_, body, _ := topTestScreen(t, smp, 0, false).table()
		for _, l := range body {
			for _, job := range []string{"flat.py", "leaky.py"} {
				if strings.Contains(l, job) {
					out[job] = strings.TrimSpace(l[strings.LastIndex(l, "  "):]) // FLAGS, the last column
				}
			}
		}
		return out
	}
	var first, last map[string]string
	for i := 0; i <= 600; i++ {
		smp, err := s.Refresh(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = flags(&smp)
		}
		if i == 600 {
			last = flags(&smp)
		}
		c.t = c.t.Add(time.Second)
	}
	for _, job := range []string{"flat.py", "leaky.py"} {
		if first[job] != flagJudging {
			t.Errorf("first sample: %s flags %q, want %q", job, first[job], flagJudging)
		}
	}
	if last["flat.py"] != flagStable || last["leaky.py"] != flagLeak {
		t.Errorf("after 10 minutes: flat.py %q, leaky.py %q; want %q and %q", last["flat.py"], last["leaky.py"], flagStable, flagLeak)
	}
}

// TestTopRunFlags: a supervised run is judged by its own monitor, which
// top reads as findings: judging… while the run is younger than the least
// time a verdict takes, then "no leak" unless the monitor raised one.
func TestTopRunFlags(t *testing.T) {
	start := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	j := attrib.Job{Key: "run:r1", Kind: attrib.KindRun, RunID: "r1", Name: "demo", Orphan: false}
	for _, tc := range []struct {
		age  time.Duration
		sum  monitor.Summary
		want []string
	}{
		{time.Minute, monitor.Summary{}, []string{flagJudging}},
		{judgeSpan + time.Second, monitor.Summary{}, []string{flagNoLeak}},
		{time.Minute, monitor.Summary{Verdict: "leak", Leak: &monitor.Finding{}}, []string{flagLeak}},
		{time.Hour, monitor.Summary{Verdict: "leak", Series: "rss", Leak: &monitor.Finding{}}, []string{flagHostLeak}},
	} {
		smp := &sampler.Reading{ProcessTime: start.Add(tc.age),
			Runs:   []timeline.RunState{{ID: "r1", AttemptStart: start}},
			Judged: map[string]*sampler.Judgement{j.Key: {Summary: tc.sum}}}
		if got := jobFlags(&j, smp); !slices.Equal(got, tc.want) {
			t.Errorf("run aged %v, verdict %q: flags %q, want %q", tc.age, tc.sum.Verdict, got, tc.want)
		}
	}
	o := attrib.Job{Key: "pid:1:1", Kind: attrib.KindProcess, Orphan: true, Flags: []string{"leak", "oom-risk"}}
	smp := &sampler.Reading{Judged: map[string]*sampler.Judgement{o.Key: {Summary: monitor.Summary{Verdict: "leak"}}}}
	if got, want := jobFlags(&o, smp), []string{flagLeak, flagOOMRisk, flagOrphan}; !slices.Equal(got, want) {
		t.Errorf("leaking orphan near OOM: flags %q, want %q", got, want)
	}
}

var sgrColor = regexp.MustCompile(`\x1b\[[0-9;]*38;[25];[0-9;]*m`)

// TestTopColours: load colours on the bars and figures, a shade for dark
// and one for light backgrounds, none under NO_COLOR (bold stays).
func TestTopColours(t *testing.T) {
	_, smp := topTestReading(t)
	draw := func(env map[string]string, dark bool) (devs []string, table string) {
		env["TERM"], env["COLORTERM"] = "xterm-256color", "truecolor"
		r, color := topRenderer(&bytes.Buffer{}, func(k string) string { return env[k] }, termenv.WithUnsafe())
		r.SetHasDarkBackground(dark)
		sc := topTestScreen(t, &smp, 200, false)
		sc.st = newTopStyles(r, color)
		head, body, _ := sc.table()
		return sc.deviceLines(), head + "\n" + strings.Join(body, "\n")
	}
	rgb := func(hex string) string { // "#FF5F5F" -> "38;2;255;95;95"
		return termenv.TrueColor.Color(hex).Sequence(false)
	}
	for _, dark := range []bool{true, false} {
		shade := func(i int) string {
			if dark {
				return rgb(topLoadColors[i].Dark)
			}
			return rgb(topLoadColors[i].Light)
		}
		devs, table := draw(map[string]string{}, dark)
		// GPU 0 is 86% full (heavy), GPU 1 52% (moderate), MIG 2:1 5% (light)
		for i, want := range map[int]string{0: shade(2), 1: shade(1), 4: shade(0)} {
			if !strings.Contains(devs[i], want) {
				t.Errorf("dark %v: device line %d lacks colour %s: %q", dark, i, want, devs[i])
			}
		}
		// the pod's 64 GiB of two 80 GiB GPUs (40%) is moderate, the
		// utilisation 92% heavy
		if !strings.Contains(devs[0], shade(2)+"mutil 92%") {
			t.Errorf("dark %v: util 92%% not drawn heavy: %q", dark, devs[0])
		}
		if !strings.Contains(table, shade(1)+"m64.0 GiB") {
			t.Errorf("dark %v: the pod's GPU memory not drawn moderate:\n%q", dark, table)
		}
	}
	for _, env := range []map[string]string{{"NO_COLOR": "1"}, {"CLICOLOR": "0"}} {
		devs, table := draw(env, true)
		all := strings.Join(devs, "\n") + table
		if sgrColor.MatchString(all) {
			t.Errorf("%v: colours drawn: %q", env, sgrColor.FindString(all))
		}
		if !strings.Contains(table, "\x1b[1m") {
			t.Errorf("%v: the header is no longer bold: %q", env, table)
		}
		if ansi.Strip(all) == all {
			t.Errorf("%v: no attributes at all", env)
		}
	}
}
