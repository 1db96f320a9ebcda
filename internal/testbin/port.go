package testbin

import (
	"net"
	"testing"
)

// FreePort is a TCP port on 127.0.0.1 that was free a moment ago: the
// kernel's choice for a listener opened and closed at once. Another
// program may take it before the caller listens on it.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
