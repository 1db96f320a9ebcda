package e2e

import (
	"encoding/json"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
)

// TestRunNamesStartedAtOnce: six runs started at the same moment with the
// same --name are recorded under six different names (demo, demo-2, ...),
// and each that did not get the name asked for says which it got.
func TestRunNamesStartedAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if r := e.run("run", "--name", "first", "--", "true"); r.code != 0 { // the state directory exists before the race
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	const n = 6
	var wg sync.WaitGroup
	stderrs := make([]string, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(bin, "run", "--name", "demo", "--gpu-backend", "none", "--", "true")
			cmd.Env = e.environ()
			var se strings.Builder
			cmd.Stderr = &se
			if err := cmd.Run(); err != nil {
				t.Errorf("run %d: %v: %s", i, err, se.String())
			}
			stderrs[i] = se.String()
		}()
	}
	wg.Wait()
	var runs []struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal([]byte(e.run("runs", "--json").stdout), &runs); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range runs {
		if strings.HasPrefix(r.Name, "demo") {
			names = append(names, r.Name)
		}
	}
	sort.Strings(names)
	want := []string{"demo", "demo-2", "demo-3", "demo-4", "demo-5", "demo-6"}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Errorf("names %q, want %q", names, want)
	}
	said := 0
	for _, s := range stderrs {
		if strings.Contains(s, "this run is demo-") {
			said++
		}
	}
	if said != n-1 {
		t.Errorf("%d runs said which name they got, want %d:\n%s", said, n-1, strings.Join(stderrs, "\n"))
	}
}
