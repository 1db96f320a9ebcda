package probe

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// `%vramguard who`'s walk (vramguard/holders.py) over namespaces built to
// test it (testdata/scripts/holders_cases.py). Each holder path is held
// against what it evaluates to in the notebook's namespace, and the
// storages found against gc's own list of live tensors.

type holdersStorage struct {
	Ptr    int64  `json:"ptr"`
	Bytes  int64  `json:"bytes"`
	Device string `json:"device"`
	Error  string `json:"error"`
}

type holdersRun struct {
	Seed      int                       `json:"seed"`
	Report    nbWho                     `json:"report"`
	Live      []holdersStorage          `json:"live"`
	Evals     map[string]holdersStorage `json:"evals"`
	Warnings  []string                  `json:"warnings"`
	Reachable []holdersStorage          `json:"reachable"`
}

func runHolders(t *testing.T, args ...string) []holdersRun {
	t.Helper()
	env := Env(baseEnv("IPYTHONDIR="+filepath.Join(t.TempDir(), "ipython")), probeDir(t), Options{})
	r := runPython(t, env, nil, append([]string{testdata(t, "scripts/holders_cases.py")}, args...)...)
	if r.code != 0 {
		t.Fatalf("holders_cases.py %v: exit %d\nstderr:\n%s", args, r.code, r.stderr)
	}
	var hs []holdersRun
	for _, line := range strings.Split(string(r.stdout), "\n") {
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var h holdersRun
		if err := json.Unmarshal([]byte(line), &h); err != nil {
			t.Fatalf("holders_cases.py %v: %v\n%s", args, err, line)
		}
		hs = append(hs, h)
	}
	return hs
}

// checkEvery holds every storage of the report against gc's live tensors
// (each once, bytes equal) and every path that is an expression against
// what it evaluates to. It returns the storages the named paths reach.
func checkEvery(t *testing.T, h holdersRun) map[int64]bool {
	t.Helper()
	live := map[int64]int64{}
	for _, s := range h.Live {
		live[s.Ptr] = s.Bytes
	}
	var n int
	var reported, want int64
	named := map[int64]bool{}
	for _, g := range h.Report.Groups {
		for _, r := range g.Tensors {
			n++
			reported += r.Bytes
			if r.Path == "<no name reaches it>" {
				continue
			}
			e, ok := h.Evals[r.Path]
			if !ok {
				continue // not an expression: a closure, a frame's local
			}
			if e.Error != "" || e.Bytes != r.Bytes || live[e.Ptr] != r.Bytes {
				t.Errorf("%s: reported %d bytes; evaluates to %+v (gc's storage there: %d bytes)", r.Path, r.Bytes, e, live[e.Ptr])
			}
			if named[e.Ptr] {
				t.Errorf("%s: its storage is reported twice", r.Path)
			}
			named[e.Ptr] = true
			for _, a := range r.Also {
				if ea, ok := h.Evals[a]; ok && ea.Ptr != e.Ptr {
					t.Errorf("%s (also %s): %s evaluates to %+v, not the same storage", r.Path, a, a, ea)
				}
			}
			if root := rootName(r.Path); root != g.Holder && g.Holder != "output cache" && g.Holder != "last exception" {
				t.Errorf("%s is grouped under %q", r.Path, g.Holder)
			}
		}
	}
	for _, b := range live {
		want += b
	}
	if n != len(live) || reported != want {
		t.Errorf("who reports %d storages, %d bytes; gc has %d live storages, %d bytes", n, reported, len(live), want)
	}
	if len(h.Warnings) != 0 {
		t.Errorf("the scan warned: %q", h.Warnings)
	}
	return named
}

// rootName is the name a holder path starts from: "rows" of
// "rows[3]['t']", "st" of "list(st)[0]".
func rootName(path string) string {
	for strings.HasPrefix(path, "list(") {
		path = path[len("list("):]
	}
	if i := strings.IndexAny(path, "[.()"); i >= 0 {
		return path[:i]
	}
	return path
}

func TestWhoHolders(t *testing.T) {
	t.Parallel()
	hs := runHolders(t, "cases")
	if len(hs) != 1 {
		t.Fatalf("%d reports, want 1", len(hs))
	}
	h := hs[0]
	checkEvery(t, h)
	cases := []struct {
		name, path, holder string
		bytes              int64
		also               []string
	}{
		{"a name", "t_plain", "t_plain", 1000, nil},
		{"one tensor among 4000 containers", "rows[1234]['t']", "rows", 1001, nil},
		{"attributes", "box.inner.t", "box", 1002, nil},
		{"dict subclass", "od['w']", "od", 1003, nil},
		{"namedtuple", "pt[1]", "pt", 1004, nil},
		{"set", "list(st)[0]", "st", 1005, nil},
		{"dict key", "list(keyed)[0]", "keyed", 1006, nil},
		{"defaultdict", "dd['k'][0]", "dd", 1007, nil},
		{"list subclass item", "tl[0]", "tl", 1008, nil},
		{"list subclass attribute", "tl.extra", "tl", 1009, nil},
		{"cycle", "cyc[0]", "cyc", 1010, nil},
		{"shortest of three", "shared[0]", "shared", 1011, nil},
		{"the same tensor by two names", "alias_a", "alias_a", 1012, []string{"alias_b[0]"}},
		{"three times in one list", "twice[0]", "twice", 1013, nil},
		{"eleven deep", "deep" + strings.Repeat("['n']", 10) + "['t']", "deep", 1014, nil},
		{"module buffer", "mod.buf", "mod", 1015, nil},
		{"partial", "part.args[0]", "part", 1016, nil},
		{"plain object", "h.t", "h", 1017, nil},
		{"SimpleNamespace", "ns.t", "ns", 1018, nil},
		{"after 500 references to one dead end", "dead[500]", "dead", 1019, nil},
		{"unnamed cycle", "<no name reaches it>", "(no name)", 1020, nil},
		{"view", "view_base", "view_base", 1021, []string{"view_of"}},
		{"nested tuples", "tup[1][1][0]", "tup", 1022, nil},
		{"deque", "dq[1]", "dq", 1023, nil},
		{"slots", "sl.b", "sl", 1024, nil},
		{"parameter", "seq[0].weight", "seq", 36, []string{"opt.param_groups[0]['params'][0]"}},
		{"grad", "seq[0].weight.grad", "seq", 36, nil},
		{"optimizer state", "opt.state[seq[0].weight]['momentum_buffer']", "opt", 36, nil},
		{"non-leaf", "nonleaf", "nonleaf", 16, nil},
		{"a suspended generator's frame", "g_gen.gi_frame.f_locals['t']", "g_gen", 1025, nil},
		{"fifty-one lists deep", "deep51" + strings.Repeat("[0]", 51), "deep51", 1026, nil},
		{"scalars in a list", "losses[2]", "losses", 4, nil},
	}
	// 5000 lists deep: named from its root, the path's middle left out.
	var chain bool
	for _, g := range h.Report.Groups {
		for _, r := range g.Tensors {
			if r.Bytes == 1027 {
				chain = g.Holder == "chain" && strings.HasPrefix(r.Path, "chain[0][0]") && strings.Contains(r.Path, " … ") && strings.HasSuffix(r.Path, "[0][0]")
				if !chain {
					t.Errorf("5000 lists deep: %q in group %q", r.Path, g.Holder)
				}
			}
		}
	}
	if !chain {
		t.Errorf("5000 lists deep: not in who")
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, holder, ok := findBytes(&h.Report, c.path, c.bytes)
			if !ok {
				t.Fatalf("%s (%d bytes) not in who:\n%s", c.path, c.bytes, dumpWho(&h.Report))
			}
			if holder != c.holder || !slices.Equal(got.Also, c.also) {
				t.Errorf("%s: group %q, also %q; want %q, also %q", c.path, holder, got.Also, c.holder, c.also)
			}
		})
	}
}

// A random graph of lists, dicts, OrderedDicts, dicts keyed by numbers and
// objects, with shared references, cycles and dead ends: who names exactly
// the tensors a plain walk of gc's referents from the names reaches.
func TestWhoHoldersRandom(t *testing.T) {
	t.Parallel()
	// one interpreter for the three graphs (torch's import is most of the
	// cost), each gone before the next
	seeds := []int{1, 2, 3}
	hs := runHolders(t, "random", "1", "2", "3")
	if len(hs) != len(seeds) {
		t.Fatalf("%d reports for %d seeds", len(hs), len(seeds))
	}
	for i, seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			h := hs[i]
			if h.Seed != seed {
				t.Fatalf("report %d is of seed %d", i, h.Seed)
			}
			named := checkEvery(t, h)
			if len(h.Reachable) == 0 {
				t.Fatal("the graph reaches no tensor")
			}
			for _, s := range h.Reachable {
				if !named[s.Ptr] {
					t.Errorf("storage %+v is reachable from the names; who names it nowhere", s)
				}
			}
			if len(named) != len(h.Reachable) {
				t.Errorf("who names %d storages; %d are reachable", len(named), len(h.Reachable))
			}
		})
	}
}

func findBytes(w *nbWho, path string, bytes int64) (nbTensor, string, bool) {
	for _, g := range w.Groups {
		for _, r := range g.Tensors {
			if r.Path == path && r.Bytes == bytes {
				return r, g.Holder, true
			}
		}
	}
	return nbTensor{}, "", false
}

func dumpWho(w *nbWho) string {
	var b strings.Builder
	for _, g := range w.Groups {
		for _, r := range g.Tensors {
			fmt.Fprintf(&b, "%s\t%s\t%d\t%v\n", g.Holder, r.Path, r.Bytes, r.Also)
		}
	}
	return b.String()
}
