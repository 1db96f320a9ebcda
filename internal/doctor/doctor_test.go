package doctor

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/vramguard/vramguard/internal/testbin"
)

var update = flag.Bool("update", false, "rewrite golden files")

// TestContainerFixtureFindings is acceptance item 3: a container with a
// 64 MB /dev/shm, an overlay checkpoint directory and a 2 GB memory limit
// yields exactly those three findings, each with its fix.
func TestContainerFixtureFindings(t *testing.T) {
	rep := scenario{base: "container"}.run(t)
	type finding struct {
		id     string
		status Status
		fix    string
	}
	var got []finding
	for _, r := range rep.Findings() {
		got = append(got, finding{r.ID, r.Status, r.Fix})
	}
	want := []struct {
		id     string
		status Status
		fix    string
	}{
		{"container.shm", Fail, "--shm-size"},
		{"container.memory", Warn, "--memory"},
		{"storage.ephemeral", Warn, "mount a volume"},
	}
	if len(got) != len(want) {
		t.Fatalf("findings = %+v, want exactly %d", got, len(want))
	}
	for i, w := range want {
		if got[i].id != w.id || got[i].status != w.status || !strings.Contains(got[i].fix, w.fix) {
			t.Errorf("finding %d = %+v, want %s %s with a fix containing %q", i, got[i], w.id, w.status, w.fix)
		}
	}
	if !rep.Failed() {
		t.Error("a 64 MiB /dev/shm must fail the report")
	}
}

// TestBaremetalFixtureClean: the healthy workstation has no findings, so a
// finding in the table tests comes from the change each row makes.
func TestBaremetalFixtureClean(t *testing.T) {
	rep := scenario{base: "baremetal"}.run(t)
	for _, r := range rep.Checks {
		if r.Status != OK {
			t.Errorf("%s = %s: %s", r.ID, r.Status, r.Evidence)
		}
	}
	if rep.Summary.OK != len(CheckIDs()) {
		t.Errorf("summary %+v", rep.Summary)
	}
}

// TestReportGolden pins the whole --json report of each fixture.
func TestReportGolden(t *testing.T) {
	for _, base := range []string{"baremetal", "container"} {
		t.Run(base, func(t *testing.T) {
			rep := scenario{base: base}.run(t)
			got, err := json.MarshalIndent(rep, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			testbin.Golden(t, filepath.Join("testdata", "golden", base+".json"), got, *update)
		})
	}
}

func TestParseAllocConf(t *testing.T) {
	tests := []struct {
		in      string
		want    []AllocOption
		wantErr bool
	}{
		{"", nil, false},
		{"expandable_segments:True", []AllocOption{{"expandable_segments", "True"}}, false},
		{" max_split_size_mb:128 , garbage_collection_threshold:0.6", []AllocOption{{"max_split_size_mb", "128"}, {"garbage_collection_threshold", "0.6"}}, false},
		{"roundup_power2_divisions:[256:1,512:2,>:4],backend:native", []AllocOption{{"roundup_power2_divisions", "[256:1,512:2,>:4]"}, {"backend", "native"}}, false},
		{"expandable_segments", nil, true},
		{"roundup_power2_divisions:[256:1", nil, true},
		{"a:1]", nil, true},
	}
	for _, tt := range tests {
		got, err := ParseAllocConf(tt.in)
		if (err != nil) != tt.wantErr || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseAllocConf(%q) = %v, %v; want %v, err %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestAllocProblems(t *testing.T) {
	tests := []struct {
		conf  string
		fatal bool
		n     int
		text  string
	}{
		{"expandable_segments:True", false, 0, ""},
		{"max_split_size_mb:512,roundup_power2_divisions:4", false, 0, ""},
		{"roundup_power2_divisions:[256:1,512:2,>:4]", false, 0, ""},
		{"garbage_collection_threshold:0.8,per_process_memory_fraction:0.9", false, 0, ""},
		{"garbage_collection_threshold:0.8", false, 1, "does nothing"},
		{"garbage_collection_threshold:1.0", true, 1, "between 0 and 1"},
		{"expandable_segments:true", true, 1, "True or False"},
		{"expandable_segments:True,max_split_size_mb:256", false, 1, "no effect"},
		{"backend:cudaMallocAsync,max_split_size_mb:256,expandable_segments:True", false, 2, "ignores the caching allocator's options (expandable_segments, max_split_size_mb)"},
		{"backend:cudaMalloc", true, 1, "native or cudaMallocAsync"},
		{"roundup_power2_divisions:3", true, 1, "power of 2"},
		{"max_split_size_mb:abc", true, 1, "not a number"},
		{"foo:1,max_split_size_mb:10", true, 2, "unknown option \"foo\""},
	}
	for _, tt := range tests {
		opts, err := ParseAllocConf(tt.conf)
		if err != nil {
			t.Fatalf("%q: %v", tt.conf, err)
		}
		ps := AllocProblems(opts)
		fatal := false
		var texts []string
		for _, p := range ps {
			fatal = fatal || p.Fatal
			texts = append(texts, p.Text)
		}
		if len(ps) != tt.n || fatal != tt.fatal || !strings.Contains(strings.Join(texts, "|"), tt.text) {
			t.Errorf("%q: %d problems (fatal %v): %q; want %d (fatal %v) mentioning %q", tt.conf, len(ps), fatal, texts, tt.n, tt.fatal, tt.text)
		}
	}
}

func TestParseMountInfo(t *testing.T) {
	ms := parseMountInfo("36 35 98:0 /mnt1 /mnt/my\\040data rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n" +
		"garbage\n" +
		"40 22 0:30 / /mnt/my rw - tmpfs tmpfs rw,size=2g\n")
	if len(ms) != 2 {
		t.Fatalf("got %d mounts: %+v", len(ms), ms)
	}
	if ms[0].MountPoint != "/mnt/my data" || ms[0].FSType != "ext3" || ms[0].Device != "98:0" || ms[0].Source != "/dev/root" {
		t.Errorf("first mount = %+v", ms[0])
	}
	m, ok := mountFor(ms, "/mnt/my data/ckpt")
	if !ok || m.FSType != "ext3" {
		t.Errorf("mountFor(/mnt/my data/ckpt) = %+v", m)
	}
	if m, _ := mountFor(ms, "/mnt/mystuff"); m.MountPoint == "/mnt/my" {
		t.Error("/mnt/my must not hold /mnt/mystuff")
	}
	if v, _ := mountOption(ms[1], "size"); v != "2g" {
		t.Errorf("size option = %q", v)
	}
}

func TestCPUSet(t *testing.T) {
	for in, want := range map[string]int{"0-3,8,10-11": 7, "0": 1, "": 0, "0-63\n": 64, "5-2": 0, "0-3,2-5": 6, "x,1": 1} {
		if got := len(cpuSet(in)); got != want {
			t.Errorf("len(cpuSet(%q)) = %d, want %d", in, got, want)
		}
	}
}

func TestSysfsBusID(t *testing.T) {
	for in, want := range map[string]string{"00000000:8A:00.0": "0000:8a:00.0", "0000:07:00.0": "0000:07:00.0"} {
		if got := sysfsBusID(in); got != want {
			t.Errorf("sysfsBusID(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestResolvePyenvShim(t *testing.T) {
	root := t.TempDir()
	shim := filepath.Join(root, "shims", "python3")
	writeFile(t, root, "shims/python3", "#!/usr/bin/env bash\nexport PYENV_ROOT=\""+root+"\"\nexec \""+root+"/libexec/pyenv\" exec \"$program\" \"$@\"\n")
	writeFile(t, root, "version", "3.11.7\n")
	writeFile(t, root, "versions/3.11.7/bin/python3", "")
	writeFile(t, root, "versions/3.12.1/bin/python3", "")
	writeFile(t, root, "proj/.python-version", "3.12.1\n")
	for _, p := range []string{"versions/3.11.7/bin/python3", "versions/3.12.1/bin/python3"} {
		if err := os.Chmod(filepath.Join(root, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	tests := []struct {
		name, cwd string
		vars      map[string]string
		want      string
	}{
		{"global version", "/", nil, filepath.Join(root, "versions/3.11.7/bin/python3")},
		{"local .python-version", filepath.Join(root, "proj", "sub"), nil, filepath.Join(root, "versions/3.12.1/bin/python3")},
		{"PYENV_VERSION wins", filepath.Join(root, "proj"), map[string]string{"PYENV_VERSION": "3.11.7"}, filepath.Join(root, "versions/3.11.7/bin/python3")},
		{"system stays a shim", "/", map[string]string{"PYENV_VERSION": "system"}, shim},
		{"unknown version stays a shim", "/", map[string]string{"PYENV_VERSION": "3.9.0"}, shim},
	}
	for _, tt := range tests {
		if got := ResolvePyenvShim(shim, tt.cwd, env(tt.vars)); got != tt.want {
			t.Errorf("%s: got %s, want %s", tt.name, got, tt.want)
		}
	}
	if got := ResolvePyenvShim("/usr/bin/python3", "/", nil); got != "/usr/bin/python3" {
		t.Errorf("a non-shim changed: %s", got)
	}
}
