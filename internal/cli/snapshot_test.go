package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/snapshot"
	"github.com/vramguard/vramguard/internal/testbin"
)

var snapDir = filepath.Join("..", "snapshot", "testdata")

// runSnapshotCmd runs `vramguard snapshot args...` at $COLUMNS width, in
// the fixtures' directory's terms (args name fixtures by base name).
func runSnapshotCmd(t *testing.T, width int, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	f := &Factory{IO: IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut, IsTTY: width > 0},
		Now: time.Now, Getenv: func(k string) string {
			if k == "COLUMNS" && width > 0 {
				return strconv.Itoa(width)
			}
			return ""
		}}
	for i, a := range args {
		if strings.HasSuffix(a, ".pickle") || strings.HasSuffix(a, ".json") && !strings.Contains(a, "/") {
			if _, err := os.Stat(filepath.Join(snapDir, a)); err == nil {
				args[i] = filepath.Join(snapDir, a)
			}
		}
	}
	root := NewCmdRoot(f)
	root.SetArgs(append([]string{"snapshot"}, args...))
	code := exitCode(f, root.ExecuteContext(context.Background()))
	return out.String(), errOut.String(), code
}

// TestSnapshotGolden: the text of each table, on committed fixtures.
func TestSnapshotGolden(t *testing.T) {
	tests := []struct {
		golden string
		width  int
		args   []string
	}{
		{"snapshot-summary.golden", 0, []string{"v2_6_p5.pickle"}},
		{"snapshot-summary-113.golden", 0, []string{"v1_13_p2.pickle"}},
		{"snapshot-summary-empty-device.golden", 0, []string{"empty_device_p4.pickle"}},
		{"snapshot-summary-fragmented.golden", 0, []string{"fragmented_p4.pickle"}},
		{"snapshot-sites.golden", 0, []string{"v2_6_p5.pickle", "--sites", "--device", "0"}},
		{"snapshot-segments-80.golden", 80, []string{"v2_6_p5.pickle", "--segments"}},
		{"snapshot-segments.golden", 0, []string{"v2_6_p5.pickle", "--segments"}},
		{"snapshot-trace.golden", 0, []string{"v2_6_p5.pickle", "--trace", "--device", "0", "--site", "model.py", "--limit", "8"}},
		{"snapshot-diff.golden", 0, []string{"diff", "leak_step100.pickle", "leak_step1000.pickle"}},
	}
	for _, tt := range tests {
		t.Run(tt.golden, func(t *testing.T) {
			out, errOut, code := runSnapshotCmd(t, tt.width, tt.args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			out = strings.ReplaceAll(out, snapDir+string(filepath.Separator), "")
			if tt.width > 0 {
				for _, l := range strings.Split(out, "\n") {
					if cellWidth(l) > tt.width {
						t.Errorf("line wider than %d: %q", tt.width, l)
					}
				}
			}
			golden(t, tt.golden, out)
		})
	}
}

// TestSnapshotJSON: --json's figures are the package's, whole.
func TestSnapshotJSON(t *testing.T) {
	s, err := snapshot.ReadFile(filepath.Join(snapDir, "v2_6_p5.pickle"), snapshot.DefaultLimits, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runSnapshotCmd(t, 0, "v2_6_p5.pickle", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var sum struct {
		Schema  string `json:"schema"`
		Devices []struct {
			Reserved  int64           `json:"reserved_bytes"`
			Allocated int64           `json:"allocated_bytes"`
			OOM       *snapshot.OOM   `json:"oom"`
			TopSites  []snapshot.Site `json:"top_sites"`
		} `json:"devices"`
	}
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		t.Fatal(err)
	}
	want := s.Summary(-1)
	if sum.Schema != "2.3" || len(sum.Devices) != len(want) {
		t.Fatalf("schema %s, %d devices", sum.Schema, len(sum.Devices))
	}
	for i, d := range sum.Devices {
		if d.Reserved != want[i].Reserved || d.Allocated != want[i].Allocated {
			t.Errorf("device %d: %+v, want %+v", i, d, want[i])
		}
		if (d.OOM == nil) != (want[i].OOM == nil) || (d.OOM != nil && d.OOM.Size != want[i].OOM.Size) {
			t.Errorf("device %d OOM %+v, want %+v", i, d.OOM, want[i].OOM)
		}
		if len(d.TopSites) == 0 || d.TopSites[0] != s.Sites(i)[0] {
			t.Errorf("device %d top site %+v", i, d.TopSites)
		}
	}

	out, _, code = runSnapshotCmd(t, 0, "v2_6_p5.pickle", "--trace", "--json", "--action", "oom")
	var tr struct {
		Events []snapshot.TraceRow `json:"events"`
	}
	if err := json.Unmarshal([]byte(out), &tr); err != nil || code != 0 {
		t.Fatalf("%v %d", err, code)
	}
	if len(tr.Events) != 1 || tr.Events[0].Size != want[0].OOM.Size || tr.Events[0].DeviceFree != want[0].OOM.DeviceFree {
		t.Errorf("oom events %+v", tr.Events)
	}

	out, _, code = runSnapshotCmd(t, 0, "diff", "leak_step100.pickle", "leak_step1000.pickle", "--json")
	var d snapshot.Diff
	if err := json.Unmarshal([]byte(out), &d); err != nil || code != 0 {
		t.Fatalf("%v %d", err, code)
	}
	if len(d.Sites) == 0 || d.Sites[0].Site != "/home/user/train.py:57 train_step" {
		t.Errorf("diff's first site %+v", d.Sites)
	}
}

// TestSnapshotExportJSON: --export-json writes a file the command reads
// back to the same summary.
func TestSnapshotExportJSON(t *testing.T) {
	out := filepath.Join(t.TempDir(), "x.json")
	stdout, errOut, code := runSnapshotCmd(t, 0, "v2_0_p2.pickle", "--export-json", out)
	if code != 0 || stdout != "wrote "+out+"\n" {
		t.Fatalf("exit %d: %q %s", code, stdout, errOut)
	}
	a, _, _ := runSnapshotCmd(t, 0, "v2_0_p2.pickle", "--json")
	b, _, _ := runSnapshotCmd(t, 0, out, "--json")
	norm := func(s string) string {
		var m map[string]any
		json.Unmarshal([]byte(s), &m)
		// JSON has no shared objects: each use of a frame or stack is its own
		delete(m, "file")
		delete(m, "frames")
		delete(m, "stacks")
		j, _ := json.Marshal(m)
		return string(j)
	}
	if norm(a) != norm(b) || len(a) < 100 {
		t.Errorf("summary of the export differs:\n%s\n%s", a, b)
	}
}

// TestSnapshotErrors: bad input and bad flags end in one clear line and
// exit 2, never a stack trace.
func TestSnapshotErrors(t *testing.T) {
	dir := t.TempDir()
	evil := filepath.Join(dir, "evil.pickle")
	os.WriteFile(evil, []byte("\x80\x02cposix\nsystem\nq\x00X\x02\x00\x00\x00idq\x01\x85q\x02Rq\x03."), 0o644)
	trunc := filepath.Join(dir, "trunc.pickle")
	b, _ := os.ReadFile(filepath.Join(snapDir, "v2_6_p5.pickle"))
	os.WriteFile(trunc, b[:len(b)/2], 0o644)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{evil}, "not a snapshot: it holds global posix.system"},
		{[]string{trunc}, "truncated"},
		{[]string{filepath.Join(dir, "missing.pickle")}, "no such file"},
		{[]string{"v2_6_p5.pickle", "--sites", "--trace"}, "pick one"},
		{[]string{"v2_6_p5.pickle", "--site", "x"}, "filter --trace"},
		{[]string{"v2_6_p5.pickle", "--trace", "--min-size", "lots"}, "--min-size"},
		{[]string{"v2_6_p5.pickle", "--trace", "--action", "explode"}, "want one of"},
		{[]string{"v2_6_p5.pickle", "--device", "7"}, "covers 2 devices"},
		{[]string{"v2_0_p2.pickle", "--trace", "--since", "1s"}, "no times"},
		{[]string{"v1_13_p2.pickle", "--trace"}, "no trace"},
		{[]string{"diff", "v2_6_p5.pickle"}, "accepts 2 arg"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			out, errOut, code := runSnapshotCmd(t, 0, tt.args...)
			if code != ExitUsage {
				t.Errorf("exit %d, want %d; out %q err %q", code, ExitUsage, out, errOut)
			}
			if !strings.Contains(errOut, tt.want) || strings.Count(strings.TrimSpace(errOut), "\n") > 1 ||
				strings.Contains(errOut, "goroutine") {
				t.Errorf("stderr %q, want one line saying %q", errOut, tt.want)
			}
		})
	}
}

// TestSnapshotSaturationSaid: a value over 64 bits is said on stderr.
func TestSnapshotSaturationSaid(t *testing.T) {
	_, errOut, code := runSnapshotCmd(t, 0, "huge_p5.pickle")
	if code != 0 || !strings.Contains(errOut, "1 integer over 64 bits") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

// TestSnapshotSitesMarkTheOOM: on the corpus's real OOM, --sites marks the
// allocation that failed, and --sites --device N for the device that ran
// out lists its site though it holds no live bytes there.
func TestSnapshotSitesMarkTheOOM(t *testing.T) {
	p := testbin.CorpusFile(t, "snapshots/constructor-sun__memory_snapshot_oom_expandable.pickle")
	const site = "/mnt/data3/haoyangsun/CurProject/src/train/models.py:181 update_nodes"
	for _, dev := range []string{"1", "-1"} {
		out, errOut, code := runSnapshotCmd(t, 0, p, "--sites", "--device", dev)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		lines := strings.Split(out, "\n")
		if len(lines) < 2 || !strings.HasSuffix(lines[1], "(OOM: 4.9 GiB asked here) "+site) || strings.Count(out, "OOM") != 1 {
			t.Errorf("--device %s: the OOM's site is not marked first:\n%s", dev, out)
		}
		var j struct {
			Sites []snapshot.Site `json:"sites"`
		}
		js, _, _ := runSnapshotCmd(t, 0, p, "--sites", "--device", dev, "--json")
		if err := json.Unmarshal([]byte(js), &j); err != nil {
			t.Fatal(err)
		}
		if len(j.Sites) == 0 || j.Sites[0].Site != site || j.Sites[0].OOMBytes != 5308694528 {
			t.Errorf("--device %s --json: sites start %+v", dev, j.Sites[:min(1, len(j.Sites))])
		}
	}
}

// TestSnapshotHostileSizes: a negative size is refused in one line; sums
// past the largest int64 stop there and the summary says so.
func TestSnapshotHostileSizes(t *testing.T) {
	dir := t.TempDir()
	neg := filepath.Join(dir, "neg.json")
	os.WriteFile(neg, []byte(`{"segments": [], "device_traces": [[{"action": "oom", "device_free": 0, "size": -5, "stream": 0}]]}`), 0o644)
	_, errOut, code := runSnapshotCmd(t, 0, neg)
	if code != ExitUsage || !strings.Contains(errOut, "a trace entry's size is -5: sizes are never negative") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
	big := filepath.Join(dir, "big.json")
	os.WriteFile(big, []byte(`{"segments": [{"device": 0, "address": 1, "total_size": 6917529027641081856, "blocks": [{"size": 6917529027641081856, "state": "active_allocated"}]},
		{"device": 0, "address": 9, "total_size": 6917529027641081856, "blocks": [{"size": 6917529027641081856, "state": "inactive"}]}]}`), 0o644)
	out, errOut, code := runSnapshotCmd(t, 0, big)
	if code != 0 || !strings.Contains(out, "reserved   8 EiB") || !strings.Contains(out, "note       a sum passed 8 EiB and stopped there") {
		t.Errorf("exit %d: %s%s", code, out, errOut)
	}
}
