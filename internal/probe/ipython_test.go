package probe

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// `%load_ext vramguard` in IPython (Debian's python3-ipython) with the probe
// directory on sys.path: it connects to the agent socket under
// $VRAMGUARD_HOME and counts vramguard.step().
func TestIPythonLoadExt(t *testing.T) {
	t.Parallel()
	home, err := os.MkdirTemp("", "vgh-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	l, err := Listen(DefaultSocket(home))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	cell := strings.Join([]string{
		"import sys; sys.path.insert(0, " + pyQuote(probeDir(t)) + ")",
		"%load_ext vramguard",
		"import vramguard",
		"for _ in range(5): vramguard.step()",
		"print('steps counted')",
	}, "\n")
	env := baseEnv("VRAMGUARD_HOME="+home, "IPYTHONDIR="+filepath.Join(home, "ipython"))
	r := runPython(t, env, nil, "-m", "IPython", "--quick", "--no-banner", "--colors=NoColor",
		"--HistoryManager.enabled=False", "--TerminalInteractiveShell.term_title=False", "-c", cell)
	if r.code != 0 || !strings.Contains(string(r.stdout), "steps counted") {
		t.Fatalf("ipython: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	msgs := collect(t, l, r.pid)
	if len(byType(msgs, r.pid, TypeHello)) != 1 {
		dumpMessages(t, msgs)
		t.Fatal("no hello from the kernel")
	}
	var s Summary
	for _, m := range msgs {
		s.Add(m)
	}
	if s.UserSteps != 5 {
		t.Errorf("user steps %d, want 5", s.UserSteps)
	}
}

func pyQuote(s string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), "'", `\'`) + "'"
}
