package probe

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
)

// TestScriptAutosaveChain: vramguard.autosave() in a script, the signals
// sent by the script to itself three optimizer steps in (testdata/scripts/
// script_autosave.py). A warning is saved at the next step (Adam's own step
// count in the file is 4, the number in its name), then the handler that
// was there before runs: the job's own (after the save), none for an
// ignored signal, SIGTERM's default (the job ends of it, after its save).
// A SIGTERM the job handles itself is the job's: no save of ours. A warning
// before any step has nothing to wait for; --save-on's variable chooses the
// signal; a signal that cannot be caught is a one-line error.
func TestScriptAutosaveChain(t *testing.T) {
	type facts struct {
		Calls [][]any `json:"calls"`
		Error string  `json:"error"`
		Saves [][]any `json:"saves"`
		Steps int     `json:"steps"`
	}
	cases := []struct {
		scenario string
		env      []string
		signal   syscall.Signal // the job ends of it; 0: it exits 0 and prints its facts
		want     facts
		files    []string // the autosaves' step numbers, when the job ends of a signal
	}{
		{scenario: "own_handler", want: facts{Calls: [][]any{{"SIGUSR1", 3.0}, {"SIGTERM", 5.0}}, Saves: [][]any{{"0.pt", 0.0}, {"4.pt", 4.0}}, Steps: 7}},
		{scenario: "ignored", want: facts{Calls: [][]any{}, Saves: [][]any{{"0.pt", 0.0}, {"4.pt", 4.0}}, Steps: 5}},
		{scenario: "term", signal: syscall.SIGTERM, files: []string{"0", "4"}},
		{scenario: "thread", signal: syscall.SIGTERM, files: []string{"0", "4"}},
		{scenario: "idle", want: facts{Calls: [][]any{}, Saves: [][]any{{"0.pt", 0.0}}, Steps: 3}},
		{scenario: "save_on", env: []string{"VRAMGUARD_SAVE_ON=SIGHUP"}, want: facts{Calls: [][]any{}, Saves: [][]any{{"0.pt", 0.0}, {"4.pt", 4.0}}, Steps: 5}},
		{scenario: "bad_save_on", want: facts{Error: "SIGKILL is not a signal that can be caught"}},
	}
	for _, c := range cases {
		t.Run(c.scenario, func(t *testing.T) {
			t.Parallel()
			d := filepath.Join(t.TempDir(), "ckpt")
			env := baseEnv(append([]string{"PYTHONPATH=" + probeDir(t)}, c.env...)...)
			r := runPython(t, env, nil, testdata(t, "scripts/script_autosave.py"), c.scenario, d)
			if c.signal != 0 {
				if r.code != 128+int(c.signal) && r.code != -1 {
					t.Fatalf("exit %d, want death by %v\n%s", r.code, c.signal, r.stderr)
				}
				var got []string
				re := regexp.MustCompile(`^autosave-script_autosave-[0-9a-f]{8}-\d{8}-\d{6}-(\d+)\.pt$`)
				ents, _ := os.ReadDir(d)
				for _, e := range ents {
					if m := re.FindStringSubmatch(e.Name()); m != nil {
						got = append(got, m[1])
					}
				}
				sort.Strings(got)
				if !reflect.DeepEqual(got, c.files) {
					t.Fatalf("autosaves at steps %v, want %v (%v)", got, c.files, ents)
				}
				return
			}
			if r.code != 0 {
				t.Fatalf("exit %d\n%s", r.code, r.stderr)
			}
			var f facts
			r.lastJSON(t, &f)
			if c.want.Calls == nil {
				c.want.Calls = [][]any{}
			}
			if f.Calls == nil {
				f.Calls = [][]any{}
			}
			if !reflect.DeepEqual(f, c.want) {
				g, _ := json.Marshal(f)
				w, _ := json.Marshal(c.want)
				t.Fatalf("got  %s\nwant %s\n%s", g, w, strings.TrimSpace(string(r.stderr)))
			}
		})
	}
}
