package trace

import (
	"io"
	"math"
	"strings"
	"testing"

	"github.com/vramguard/vramguard/internal/analyze"
)

func TestReadMalformed(t *testing.T) {
	cases := []struct {
		name, in, want string
	}{
		{"empty", "", "empty file"},
		{"bad header", "time,allocated,reserved,used,total\n0,1,2,3,4\n", "bad header"},
		{"short header", "t,allocated\n", "bad header"},
		{"unknown column", Header + ",foo\n", "unknown or repeated column"},
		{"non-numeric", Header + "\n0,1,2,3,4\n1,abc,2,3,4\n", "line 3, column allocated: \"abc\" is not a finite number"},
		{"nan", Header + "\n0,NaN,2,3,4\n", "line 2, column allocated: \"NaN\" is not a finite number"},
		{"inf", Header + "\n0,1,2,Inf,4\n", "column used"},
		{"negative", Header + "\n0,-1,2,3,4\n", "is negative"},
		{"backwards", Header + "\n0,1,2,3,4\n5,1,2,3,4\n4,1,2,3,4\n", "line 4: time goes backwards (4 after 5)"},
		{"cells", Header + "\n0,1,2,3\n", "line 2: 4 cells, want 5"},
		{"empty t", Header + "\n,1,2,3,4\n", "line 2: empty t"},
		{"fractional step", Header + ",step\n0,1,2,3,4,1.5\n", "not a whole number"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Read(strings.NewReader(c.in))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Read: err = %v, want it to contain %q", err, c.want)
			}
		})
	}
}

func TestReadGood(t *testing.T) {
	in := Header + ",rss,step\n0,,,545259520,25769803776,100,\n1.5,10,20,30,40,200,7\n1.5,11,21,31,41,,8\n"
	s, err := Read(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(s) != 3 {
		t.Fatalf("got %d samples, want 3", len(s))
	}
	if !math.IsNaN(s[0].Allocated) || !math.IsNaN(s[0].Reserved) || s[0].Used != 545259520 || s[0].Step != -1 || s[0].RSS != 100 {
		t.Errorf("sample 0 = %+v", s[0])
	}
	if s[1].T != 1.5 || s[1].Allocated != 10 || s[1].Reserved != 20 || s[1].Total != 40 || s[1].Step != 7 {
		t.Errorf("sample 1 = %+v", s[1])
	}
	if !math.IsNaN(s[2].RSS) || !math.IsNaN(s[2].Limit) {
		t.Errorf("sample 2 = %+v", s[2])
	}
}

func TestReadPublicCopies(t *testing.T) {
	labels, err := ReadLabels("testdata")
	if err != nil {
		t.Fatal(err)
	}
	for name, l := range labels {
		s, err := ReadFile("testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		if len(s) < 100 {
			t.Errorf("%s: %d samples", name, len(s))
		}
		if l.NVMLOnly != math.IsNaN(s[len(s)/2].Allocated) {
			t.Errorf("%s: nvml_only=%v but allocated=%v", name, l.NVMLOnly, s[len(s)/2].Allocated)
		}
	}
}

// same reports whether two figures are the same, NaN (absent) included.
func same(a, b float64) bool { return a == b || (math.IsNaN(a) && math.IsNaN(b)) }

// Writer writes every column; ReadRows reads back the very numbers written,
// absent figures as empty cells and back as absent.
func TestWriteRead(t *testing.T) {
	n := math.NaN()
	rows := []Row{
		{Sample: analyze.Sample{T: 0, Allocated: n, Reserved: n, Used: 545259520, Total: 25769803776, RSS: 3 << 30, Limit: n,
			InactiveSplit: n, AllocRetries: n, Step: -1}, PSS: n, CgroupUsage: n},
		{Sample: analyze.Sample{T: 0.7, Allocated: 4294967296, Reserved: 4311744512, Used: 4836032512, Total: 25769803776,
			RSS: 3221225472, Limit: 68719476736, InactiveSplit: 1048576, AllocRetries: 0, Step: 0}, PSS: 2899102924, CgroupUsage: 3435973836},
		{Sample: analyze.Sample{T: 899.123, Allocated: 1, Reserved: 2, Used: n, Total: n, RSS: n, Limit: 17179869184,
			InactiveSplit: 3, AllocRetries: 7, Step: 1284}, PSS: n, CgroupUsage: 5},
		// not measured: negative and infinite figures are written as absent
		{Sample: analyze.Sample{T: 1e6 + 0.001, Allocated: -1, Reserved: math.Inf(1), Used: n, Total: n, RSS: n, Limit: n,
			InactiveSplit: n, AllocRetries: n, Step: -1}, PSS: n, CgroupUsage: n},
	}
	var b strings.Builder
	w := NewWriter(&b)
	for _, r := range rows {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(b.String(), "\n")
	want := []string{
		"t,allocated,reserved,used,total,rss,pss,limit,cgroup_usage,step,inactive_split,alloc_retries",
		"0,,,545259520,25769803776,3221225472,,,,,,",
		"0.7,4294967296,4311744512,4836032512,25769803776,3221225472,2899102924,68719476736,3435973836,0,1048576,0",
		"899.123,1,2,,,,,17179869184,5,1284,3,7",
		"1000000.001,,,,,,,,,,,",
		"",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Fatalf("wrote\n%s\nwant\n%s", b.String(), strings.Join(want, "\n"))
	}
	got, err := ReadRows(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	rows[3].Allocated, rows[3].Reserved = n, n
	if len(got) != len(rows) {
		t.Fatalf("read %d rows, want %d", len(got), len(rows))
	}
	for i, g := range got {
		r := rows[i]
		if !same(g.T, r.T) || !same(g.Allocated, r.Allocated) || !same(g.Reserved, r.Reserved) || !same(g.Used, r.Used) ||
			!same(g.Total, r.Total) || !same(g.RSS, r.RSS) || !same(g.Limit, r.Limit) || !same(g.InactiveSplit, r.InactiveSplit) ||
			!same(g.AllocRetries, r.AllocRetries) || g.Step != r.Step || !same(g.PSS, r.PSS) || !same(g.CgroupUsage, r.CgroupUsage) {
			t.Errorf("row %d read back as %+v, want %+v", i, g, r)
		}
	}
	for _, bad := range []float64{-0.5, n, math.Inf(1)} {
		w := NewWriter(io.Discard)
		if err := w.Write(Row{Sample: analyze.NaNSample(bad)}); err == nil || w.Flush() == nil {
			t.Errorf("time %v written without an error", bad)
		}
	}
}
