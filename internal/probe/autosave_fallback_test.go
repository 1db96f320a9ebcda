package probe

import (
	"encoding/json"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestAutosaveFallbackCases: vramguard.autosave()'s fallback in a script
// (testdata/scripts/autosave_fallback.py), each case's saves as torch reads
// them (the number in the file's name, Adam's step in it) and how many the
// fallback made. A job that is not stepping when warned is saved at once
// when it stepped since its last save, and not again when it did not;
// fallback=None never saves without a step, fallback=0 saves at once;
// LR schedulers made before and after autosave() count steps through the
// guarded step without a warning; a fallback that is not a duration is a
// one-line error.
func TestAutosaveFallbackCases(t *testing.T) {
	type facts struct {
		Error     string   `json:"error"`
		Saves     [][]any  `json:"saves"`
		Fallbacks *int     `json:"fallbacks"`
		Steps     int      `json:"steps"`
		Warnings  []string `json:"warnings"`
		LR        []bool   `json:"lr_as_without"`
		Guarded   *bool    `json:"guarded_after_off"`
	}
	n := func(i int) *int { return &i }
	no := false
	cases := []struct {
		scenario string
		want     facts
	}{
		{"quiet", facts{Saves: [][]any{{"0.pt", 0.0}, {"3.pt", 3.0}}, Fallbacks: n(1), Steps: 3}},
		{"quiet_saved", facts{Saves: [][]any{{"0.pt", 0.0}, {"3.pt", 3.0}}, Fallbacks: n(0), Steps: 3}},
		{"off", facts{Saves: [][]any{{"0.pt", 0.0}}, Fallbacks: n(0), Steps: 3}},
		{"zero", facts{Saves: [][]any{{"0.pt", 0.0}, {"3.pt", 3.0}}, Fallbacks: n(1), Steps: 3}},
		{"schedulers", facts{Saves: [][]any{{"0.pt", 0.0}}, Fallbacks: n(0), Steps: 5, LR: []bool{true, true, true}, Guarded: &no}},
		{"bad_fallback", facts{Error: "fallback must be a duration (2s, 1.5s, seconds) or None, not 'soon'"}},
	}
	for _, c := range cases {
		t.Run(c.scenario, func(t *testing.T) {
			t.Parallel()
			d := filepath.Join(t.TempDir(), "ckpt")
			env := baseEnv("PYTHONPATH=" + probeDir(t))
			r := runPython(t, env, nil, testdata(t, "scripts/autosave_fallback.py"), c.scenario, d)
			if r.code != 0 {
				t.Fatalf("exit %d\n%s", r.code, r.stderr)
			}
			var f facts
			r.lastJSON(t, &f)
			if f.Warnings == nil {
				f.Warnings = []string{}
			}
			if c.want.Warnings == nil {
				c.want.Warnings = []string{}
			}
			if !reflect.DeepEqual(f, c.want) {
				g, _ := json.Marshal(f)
				w, _ := json.Marshal(c.want)
				t.Fatalf("got  %s\nwant %s\n%s", g, w, strings.TrimSpace(string(r.stderr)))
			}
		})
	}
}
