package trace

import (
	"math"
	"strings"
	"testing"
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
