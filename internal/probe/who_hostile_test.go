package probe

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestWhoRunsNoUserCode: `%vramguard who` over objects whose classes run
// code when looked at (testdata/scripts/who_hostile.py): each class records
// itself when any of its code runs. The scan runs none of it, and still
// names the tensor each one holds.
func TestWhoRunsNoUserCode(t *testing.T) {
	t.Parallel()
	env := Env(baseEnv("IPYTHONDIR="+filepath.Join(t.TempDir(), "ipython")), probeDir(t), Options{})
	r := runPython(t, env, nil, testdata(t, "scripts/who_hostile.py"))
	if r.code != 0 {
		t.Fatalf("who_hostile.py: exit %d\nstderr:\n%s", r.code, r.stderr)
	}
	var rep struct {
		Fired []string          `json:"fired"`
		Cases map[string]string `json:"cases"`
	}
	r.lastJSON(t, &rep)
	cases := []struct{ class, root string }{
		{"tensor subclass grad property", "t_grad"},
		{"tensor subclass __torch_function__", "t_fn"},
		{"optimizer subclass state/param_groups properties", "opt_hostile"},
		{"dict subclass keys/values/items/__iter__", "d_hostile"},
		{"list subclass __iter__/__len__/__getitem__", "l_hostile"},
		{"__class__ property (isinstance)", "c_hostile"},
		{"__getattribute__ of a plain object", "g_hostile"},
		{"__dict__ property", "dp_hostile"},
		{"exception subclass __getattribute__/args", "e_hostile"},
		{"nn.Module subclass methods and __getattribute__", "m_hostile"},
		{"metaclass __hash__/__eq__/__getattribute__", "mh_hostile"},
		{"a key's __repr__", "k_hostile"},
		{"an exec() locals mapping's items/keys", "sys.last_traceback: <module>() in "},
	}
	if len(rep.Cases) != len(cases) {
		t.Errorf("the script reports %d cases, the table has %d", len(rep.Cases), len(cases))
	}
	for _, c := range cases {
		t.Run(c.class, func(t *testing.T) {
			if slices.Contains(rep.Fired, c.class) {
				t.Errorf("who ran the class's code")
			}
			if p := rep.Cases[c.class]; !strings.HasPrefix(strings.TrimPrefix(p, "list("), c.root) {
				t.Errorf("its tensor is named %q, want a path from %s", p, c.root)
			}
		})
	}
}
