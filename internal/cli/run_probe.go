package cli

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"

	"github.com/vramguard/vramguard/internal/probe"
	"github.com/vramguard/vramguard/internal/store"
	"github.com/vramguard/vramguard/internal/supervise"
)

// The probe's hook is the supervisor's probe.
var (
	_ supervise.Probe           = (*probe.Hook)(nil)
	_ supervise.KernelShutdowns = (*probe.Hook)(nil)
)

// probeHook installs the probe and listens for it. It is the one place that
// decides the probe's environment of a supervised job, Jupyter kernels
// included: every attempt's processes report to this supervisor's socket,
// whatever probe variables the supervisor itself inherited, and the same
// messages go, best effort, to the machine-wide agent's socket the job would
// have reported to without this supervisor (probe.AgentSocketFor), so that
// `vramguard serve` shows allocator figures of supervised jobs too. The agent
// hears each process from that process itself: it never trusts a relay. A
// failure never stops the job: it is logged and the job runs unprobed.
func probeHook(f *Factory, o *RunOptions, run *store.Run) (*probe.Hook, func()) {
	log := f.Logger()
	dir, src, err := findProbe(f)
	if err != nil {
		log.Warn("probe not installed; the job runs without it", "err", err)
		return nil, nil
	}
	log.Debug("probe", "dir", dir, "source", src)
	// Unix socket paths are short (107 bytes): keep it out of deep homes, in
	// a directory no other user can enter ($XDG_RUNTIME_DIR, else TMPDIR).
	sock, cleanup, note, err := probe.SupervisorSocket(f.Getenv, supervisorSocketName())
	if err != nil {
		log.Warn("probe socket unavailable; the job runs without the probe", "err", err)
		return nil, nil
	}
	if note != "" {
		fmt.Fprintf(f.IO.ErrOut, "vramguard: %s\n", note)
	}
	l, err := probe.Listen(sock)
	if err != nil {
		cleanup()
		log.Warn("probe socket unavailable; the job runs without the probe", "err", err)
		return nil, nil
	}
	h := probe.NewHook(dir, l, probe.Options{Socket: sock, AgentSocket: probe.AgentSocketFor(os.Getenv, f.Home()),
		Hz: o.ProbeHz, RunDir: run.Dir, OOMSnapshot: o.OOMSnapshot, AtomicSave: o.AtomicSave, RunID: run.ID}, f.Now)
	return h, func() {
		l.Close()
		cleanup()
		// Forked workers that never dumped leave empty stack files.
		probe.RemoveEmptyStackFiles(run.Dir)
	}
}

// supervisorSocketName is the name of a supervisor's probe socket: random,
// so that the socket's path, which every user reads in /proc/net/unix,
// names no run (a run id is for its owner alone).
func supervisorSocketName() string {
	var b [8]byte
	rand.Read(b[:])
	return "s-" + hex.EncodeToString(b[:]) + ".sock"
}
