package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/vramguard/vramguard/internal/agent"
	"github.com/vramguard/vramguard/internal/snapshot"
)

// serveSnapshot draws s in the browser until interrupted: the address is
// loopback unless --addr names another, and the URL is printed.
func serveSnapshot(f *Factory, o SnapshotOptions, s *snapshot.Snapshot) error {
	host, _, err := net.SplitHostPort(o.Addr)
	if err != nil {
		return Usagef("--addr %q: want HOST:PORT (127.0.0.1:0 picks a free port)", o.Addr)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		fmt.Fprintf(f.IO.ErrOut, "vramguard: --addr %s is not a loopback address: anyone who can reach it can read the snapshot\n", o.Addr)
	}
	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return Envf("--serve: %v", err)
	}
	srv := &http.Server{Handler: agent.SnapshotHandler(s, filepath.Base(o.Path)), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(f.IO.Out, "http://%s/  (%s; Ctrl-C stops)\n", ln.Addr(), filepath.Base(o.Path))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return Failf("--serve: %v", err)
	}
	return nil
}
