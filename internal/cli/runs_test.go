package cli

import (
	"strings"
	"testing"
)

// TestLogsDefaultsToLast: `logs` without RUN is `logs last`, as `explain`
// is; `stop` still wants its RUN named.
func TestLogsDefaultsToLast(t *testing.T) {
	home, logs := logsFixture(t)
	out, errOut, code := runIn(t, home, "logs")
	if code != 0 {
		t.Fatalf("logs: exit %d: %s", code, errOut)
	}
	want, _, _ := runIn(t, home, "logs", "last")
	if out != want || !strings.Contains(out, "last stdout line without newline") {
		t.Errorf("logs without RUN printed %d bytes, logs last %d", len(out), len(want))
	}
	if got, _, _ := runIn(t, home, "logs", "--attempt", "1", "--stream", "stdout"); got != logs[0].out.String() {
		t.Errorf("logs --attempt 1 --stream stdout without RUN: %q, want %q", got, logs[0].out.String())
	}
	_, errOut, code = runIn(t, home, "stop")
	if code != ExitUsage || !strings.Contains(errOut, "accepts 1 arg") {
		t.Errorf("stop without RUN: exit %d: %s", code, errOut)
	}
}
