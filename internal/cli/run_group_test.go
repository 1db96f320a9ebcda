package cli

import (
	"slices"
	"testing"
)

func TestRunGroupPrecedence(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	for _, c := range []struct {
		flag string
		env  map[string]string
		want string
	}{
		{"g", map[string]string{"SLURM_JOB_ID": "77", "TORCHELASTIC_RUN_ID": "r"}, "g"},
		{"", map[string]string{"SLURM_JOB_ID": "77", "TORCHELASTIC_RUN_ID": "r"}, "77"},
		{"", map[string]string{"TORCHELASTIC_RUN_ID": "r"}, "r"},
		{"", map[string]string{"TORCHELASTIC_RUN_ID": "none"}, ""},
		{"", nil, ""},
	} {
		g := groupFlags{Group: c.flag}
		if got := g.group(env(c.env)); got != c.want {
			t.Errorf("--group %q, env %v: %q, want %q", c.flag, c.env, got, c.want)
		}
	}
	g := groupFlags{Group: "job", Node: "n1"}
	base := []string{"A=1"}
	got := g.env(base, env(nil))
	if !slices.Equal(got, []string{"A=1", "VRAMGUARD_GROUP=job", "VRAMGUARD_NODE=n1"}) || len(base) != 1 {
		t.Fatalf("env %v (base %v)", got, base)
	}
}
