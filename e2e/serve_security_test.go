package e2e

import (
	"strings"
	"testing"
)

// TestServeRefusesOpenListenWithoutToken: serve exits 2 before listening
// when asked for a non-loopback address without a token.
func TestServeRefusesOpenListenWithoutToken(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
		r := newEnv(t).run("serve", "--listen", addr, "--gpu-backend", "none", "--probe-socket", "none")
		if r.code != 2 || !strings.Contains(r.stderr, "without a token") {
			t.Errorf("serve --listen %s without a token: exit %d, stderr %q", addr, r.code, r.stderr)
		}
	}
}
