package probe

import (
	"net"
	"os"
	"path/filepath"
	"testing"
)

// TestAgentSocketForShared: a shared agent's probe socket (serve --shared)
// is chosen over the state directory's when it exists and is a socket;
// inherited sockets still win.
func TestAgentSocketForShared(t *testing.T) {
	dir := t.TempDir()
	ln, err := net.Listen("unix", filepath.Join(dir, AgentSocketName))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	notSock := t.TempDir()
	if err := os.WriteFile(filepath.Join(notSock, AgentSocketName), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"the shared socket", map[string]string{EnvSharedDir: dir}, filepath.Join(dir, AgentSocketName)},
		{"an inherited agent socket wins", map[string]string{EnvSharedDir: dir, EnvAgentSocket: "/run/vg/p.sock"}, "/run/vg/p.sock"},
		{"a plain file there is no agent", map[string]string{EnvSharedDir: notSock}, "/home/u/.vg/probe.sock"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := AgentSocketFor(func(k string) string { return tc.env[k] }, "/home/u/.vg"); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
	// a relative directory is ignored
	if got := SharedDir(func(string) string { return "run" }); got != SharedDirDefault {
		t.Errorf("SharedDir(relative) = %q", got)
	}
	if got := SharedAPISocket(func(string) string { return dir }); got != filepath.Join(dir, "api.sock") {
		t.Errorf("SharedAPISocket = %q", got)
	}
}
