package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/vramguard/vramguard/internal/agent"
	"github.com/vramguard/vramguard/internal/attrib"
	"github.com/vramguard/vramguard/internal/jupyter"
	"github.com/vramguard/vramguard/internal/probe"
	"github.com/vramguard/vramguard/internal/runctl"
	"github.com/vramguard/vramguard/internal/sampler"
	"github.com/vramguard/vramguard/internal/store"
	"github.com/vramguard/vramguard/internal/users"
)

type serveOptions struct {
	GPU          gpuOptions
	Listen       string
	Token        string
	TokenFile    string
	Interval     time.Duration
	KeepFine     time.Duration
	KeepCoarse   time.Duration
	CoarseStep   time.Duration
	MaxDisk      string
	Webhook      string
	OOMThreshold time.Duration
	UnsavedAfter time.Duration
	ProbeSocket  string
	JSON         bool
	AllowedHosts []string
	Node         string
	// Shared makes the agent every user's: probe and API sockets under
	// probe.SharedDir that everyone may connect to, each caller answered by
	// peer credentials.
	Shared        bool
	APISocket     string
	AdminGroup    string
	IdleThreshold int
	IdleWindow    time.Duration
	NotifyIdle    time.Duration
	ReclaimIdle   time.Duration
	tokenSet      bool // --token was given, even as ""
}

// NewCmdServe builds `vramguard serve`.
func NewCmdServe(f *Factory) *cobra.Command {
	o := &serveOptions{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Watch every GPU job on the machine: dashboard, JSON API, Prometheus metrics, alerts",
		Long: `serve is the machine-wide agent. One sampler reads every GPU process (and
supervised runs, and Python processes that load the probe and report to its
socket); each job's memory timeline is kept in the state directory (every
sample for --keep-fine, the per-minute peak for --keep-coarse, at most
--max-disk), judged by the leak detector, and served over HTTP:

  /            the dashboard: devices, jobs, a memory plot per job with its
               events (OOM, checkpoint, restart, leak alert, death), runs
               and their post-mortems; live
  /api/v1/     JSON: status, devices, jobs, timelines, events, alerts, runs
  /metrics     Prometheus metrics (per device and per job)
  /healthz     200 while samples are fresh

It listens on 127.0.0.1 unless --listen says otherwise; any other address
needs a token (--token or --token-file). On a loopback address it answers only
requests for a loopback host (localhost, 127.0.0.1, [::1]; 421 otherwise), so
that a web page cannot read it through DNS rebinding; --allowed-host NAME adds
a name (a proxy's, an SSH tunnel's). Requests that change anything
(POST /api/v1/events, /api/v1/jobs/KEY/kill, /api/v1/runs/ID/stop) need the
token as "Authorization: Bearer TOKEN" whatever the address.

Alerts (leak found, OOM forecast nearer than --oom-threshold, job died,
unsaved work) go to the log and, with --webhook, as a JSON POST with
retries. See docs/SERVE.md.

On a shared machine run it as root with --shared: it takes the probes of
every user's jobs on one socket (` + probe.SharedDirDefault + `/probe.sock, mode 0666;
each connection is attributed by its peer credentials, never by what it
claims) and answers every user's vramguard top on an API socket
(` + probe.SharedDirDefault + `/api.sock): their own jobs in full, others' owner and memory
only; kill, stop and restart of their own jobs only, unless they are root or
in --admin-group. A job holding GPU memory with its utilisation under
--idle-threshold for --idle-window is idle (FLAGS, the dashboard,
vramguard_job_idle_seconds); --notify-idle tells its owner. See
docs/SHARED.md.`,
		Example: `  vramguard serve
  vramguard serve --simulate examples/scenarios/workstation.json
  vramguard serve --listen 0.0.0.0:9345 --token-file /etc/vramguard/token
  vramguard serve --webhook https://hooks.example.com/gpu --oom-threshold 15m
  curl -s localhost:9345/api/v1/jobs | jq '.jobs[] | {name, gpu_bytes}'
  sudo vramguard serve --shared --admin-group gpuadmin --notify-idle 1h`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.tokenSet = cmd.Flags().Changed("token")
			return runServe(cmd.Context(), f, o)
		},
	}
	o.GPU.addFlags(cmd)
	fl := cmd.Flags()
	fl.StringVar(&o.Listen, "listen", "127.0.0.1:9345", "address to serve HTTP on (beyond loopback needs --token)")
	fl.StringVar(&o.Token, "token", "", "token for mutating requests (visible in ps; prefer --token-file)")
	fl.StringVar(&o.TokenFile, "token-file", "", "file holding the token")
	fl.StringArrayVar(&o.AllowedHosts, "allowed-host", nil, "on a loopback address, also answer requests whose Host header names this host (repeatable; localhost, 127.0.0.0/8 and [::1] always are)")
	fl.DurationVar(&o.Interval, "interval", time.Second, "how often to sample (at least 1s)")
	fl.DurationVar(&o.KeepFine, "keep-fine", 24*time.Hour, "how long every sample is kept")
	fl.DurationVar(&o.KeepCoarse, "keep-coarse", 30*24*time.Hour, "how long per-step peaks are kept")
	fl.DurationVar(&o.CoarseStep, "coarse-step", time.Minute, "resolution of the long-term timelines")
	fl.StringVar(&o.MaxDisk, "max-disk", "1GiB", "bound on stored timelines (oldest go first); 0 for none")
	fl.StringVar(&o.Webhook, "webhook", "", "URL that receives each alert as a JSON POST")
	fl.DurationVar(&o.OOMThreshold, "oom-threshold", 10*time.Minute, "alert when a job's forecast OOM is nearer than this")
	fl.DurationVar(&o.UnsavedAfter, "unsaved-after", 2*time.Hour, "alert when a probed job has gone this long without a checkpoint (0: never)")
	fl.StringVar(&o.ProbeSocket, "probe-socket", "", `probe socket (default: probe.sock in the state directory; "none" to not listen)`)
	fl.BoolVar(&o.JSON, "json", false, "print the startup line (address, socket) as JSON")
	fl.BoolVar(&o.Shared, "shared", false, "serve every user of the machine: probe and API sockets under "+probe.SharedDirDefault+" that every user may connect to (run as root)")
	fl.StringVar(&o.APISocket, "api-socket", "", `Unix socket for the API, each caller answered by peer credentials (default with --shared: api.sock beside the probe socket; "none" for none)`)
	fl.StringVar(&o.AdminGroup, "admin-group", "", "members of this group see and act on every user's jobs over the API socket (as root does)")
	fl.IntVar(&o.IdleThreshold, "idle-threshold", agent.DefaultIdleThreshold, "a job holding GPU memory is unused while its SM utilisation is under this percent")
	fl.DurationVar(&o.IdleWindow, "idle-window", agent.DefaultIdleWindow, "how long a job must stay unused to be idle")
	fl.DurationVar(&o.NotifyIdle, "notify-idle", 0, "tell a job's owner once it has been idle this long: an idle alert (with the user name) and a line their next vramguard command prints (0: never)")
	fl.DurationVar(&o.ReclaimIdle, "reclaim-idle", 0, "shut down a notebook kernel, through its Jupyter server, once it has been idle this long, telling its owner first; no other job is stopped (0: never)")
	fl.StringVar(&o.Node, "node", "", "this machine's name on the rank series (vramguard_rank_*); a rank whose environment names another node (VRAMGUARD_NODE, SLURMD_NODENAME) is left to that node's agent (default: the host name)")
	return cmd
}

// shutdownKernel shuts the kernel with id down through the Jupyter server
// that lists it (every user's servers when serve runs as root).
func shutdownKernel(ctx context.Context, f *Factory, id string) error {
	home, _ := os.UserHomeDir()
	servers, err := jupyter.Discover(jupyter.RuntimeDirs(f.Getenv, home, os.Geteuid() == 0))
	if err != nil && len(servers) == 0 {
		return err
	}
	c := &jupyter.Collector{Servers: servers, Procs: jupyter.LiveProcs{}, Now: f.Now, Timeout: 10 * time.Second}
	es, _ := c.Collect(ctx)
	for i := range es {
		if es[i].KernelID == id && es[i].ServerInfo() != nil {
			return jupyter.Act(ctx, &es[i], "shutdown", 10*time.Second)
		}
	}
	return fmt.Errorf("no Jupyter server lists kernel %s", id)
}

// listenUnix listens on a Unix socket at path with mode (a stale socket
// file is replaced; a missing directory is created 0755).
func listenUnix(path string, mode os.FileMode) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	if st, err := os.Lstat(path); err == nil && st.Mode()&os.ModeSocket != 0 {
		_ = os.Remove(path)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, mode); err != nil {
		ln.Close()
		return nil, err
	}
	if mode&0o077 != 0 {
		// every user may connect: bound each one's connections
		return probe.LimitListener(ln.(*net.UnixListener)), nil
	}
	return ln, nil
}

// serveSignals are the signals that stop serve cleanly.
var serveSignals = []os.Signal{os.Interrupt, syscall.SIGTERM}

func (o *serveOptions) token() (string, error) {
	if o.Token != "" && o.TokenFile != "" {
		return "", Usagef("--token and --token-file cannot be used together")
	}
	if o.TokenFile == "" {
		if o.tokenSet && strings.TrimSpace(o.Token) == "" {
			return "", Usagef("--token is empty or blank: give a secret (or none at all on a loopback address)")
		}
		return o.Token, nil
	}
	b, err := os.ReadFile(o.TokenFile)
	if err != nil {
		return "", Usagef("--token-file: %v", err)
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", Usagef("--token-file %s is empty", o.TokenFile)
	}
	return t, nil
}

// node is this machine's name on the rank series: --node, else the host
// name, with its short form (before the first dot) as another name a
// rank's environment may give it (Slurm's node names often are short).
func (o *serveOptions) node() (string, []string) {
	if o.Node != "" {
		return o.Node, nil
	}
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "localhost"
	}
	var aliases []string
	if short, _, ok := strings.Cut(h, "."); ok && short != "" {
		aliases = append(aliases, short)
	}
	return h, aliases
}

func (o *serveOptions) check() (agent.Retention, error) {
	var r agent.Retention
	if o.Interval < sampler.MinProcessInterval {
		return r, Usagef("--interval %v: process lists are read at most once a second", o.Interval)
	}
	if o.KeepFine <= 0 || o.KeepCoarse <= 0 || o.CoarseStep <= 0 {
		return r, Usagef("--keep-fine, --keep-coarse and --coarse-step must be positive")
	}
	if o.CoarseStep < o.Interval || o.CoarseStep%time.Second != 0 {
		return r, Usagef("--coarse-step %v: want whole seconds, at least --interval", o.CoarseStep)
	}
	if o.OOMThreshold <= 0 || o.UnsavedAfter < 0 {
		return r, Usagef("--oom-threshold must be positive and --unsaved-after not negative")
	}
	max, err := parseBytes(o.MaxDisk)
	if err != nil {
		return r, Usagef("--max-disk: %v", err)
	}
	if o.IdleThreshold < 1 || o.IdleThreshold > 100 || o.IdleWindow <= 0 || o.NotifyIdle < 0 || o.ReclaimIdle < 0 {
		return r, Usagef("--idle-threshold must be 1-100 (percent), --idle-window positive, --notify-idle and --reclaim-idle not negative")
	}
	if o.AdminGroup != "" && !users.System().HasGroup(o.AdminGroup) {
		return r, Usagef("--admin-group %q: no such group in /etc/group", o.AdminGroup)
	}
	if o.Webhook != "" && !strings.HasPrefix(o.Webhook, "http://") && !strings.HasPrefix(o.Webhook, "https://") {
		return r, Usagef("--webhook %q: want an http:// or https:// URL", o.Webhook)
	}
	return agent.Retention{Fine: o.KeepFine, Coarse: o.KeepCoarse, CoarseStep: o.CoarseStep, MaxBytes: int64(max)}, nil
}

func runServe(ctx context.Context, f *Factory, o *serveOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	ret, err := o.check()
	if err != nil {
		return err
	}
	token, err := o.token()
	if err != nil {
		return err
	}
	if err := agent.CheckListen(o.Listen, token); err != nil {
		if errors.Is(err, agent.ErrTokenRequired) {
			return Usagef("refusing to listen on %s without a token: pass --token-file (or --token), or listen on 127.0.0.1", o.Listen)
		}
		return Usagef("--listen: %v", err)
	}
	ctx, stop := signal.NotifyContext(ctx, serveSignals...)
	defer stop()
	log := f.Logger()

	b, note, err := openGPU(ctx, o.GPU.Simulate, o.GPU.Backend)
	if err != nil {
		return err
	}
	defer b.Close()
	if note != "" {
		fmt.Fprintln(f.IO.ErrOut, "vramguard:", note)
	}
	st, err := store.Open(f.Home())
	if err != nil {
		return storeErr(err) // a corrupt database is bad input, named, with how to set it aside
	}
	defer st.Close()

	runs := runctl.NewStoreHints(st, f.Home(), f.Getenv)
	reg := agent.NewProbeRegistry()
	src := procSource(b, o.GPU.ProcRoot)
	simulated := func(int) bool { return false }
	if s, ok := src.(attrib.Simulator); ok {
		simulated = s.Simulated
	}
	scfg := machineSampler(b, src, o.GPU.ProcRoot, runs, f.Now)
	scfg.Probes, scfg.ProcessInterval, scfg.OOMWarning = reg, o.Interval, o.OOMThreshold
	smp, err := sampler.New(scfg)
	if err != nil {
		return err
	}
	node, aliases := o.node()
	cfg := agent.Config{
		Sampler: smp, Store: st, Registry: reg, Retention: ret, Simulated: simulated, Now: f.Now, Log: log, Version: currentVersion().Version,
		Alerts: agent.AlertConfig{UnsavedAfter: o.UnsavedAfter, Webhook: o.Webhook},
		Node:   node, NodeAliases: aliases,
		Idle: agent.IdlePolicy{Threshold: o.IdleThreshold, Window: o.IdleWindow, NotifyAfter: o.NotifyIdle, ReclaimAfter: o.ReclaimIdle},
	}
	home, _ := os.UserHomeDir()
	cfg.KernelDirs = jupyter.RuntimeDirs(f.Getenv, home, os.Geteuid() == 0)
	if o.ReclaimIdle > 0 {
		cfg.Reclaim = func(ctx context.Context, kernelID string) error { return shutdownKernel(ctx, f, kernelID) }
	}
	if o.AdminGroup != "" {
		group := o.AdminGroup
		cfg.Admin = func(uid int) bool { return users.System().InGroup(uid, group) }
	}
	sock := o.ProbeSocket
	if sock == "" {
		sock = probe.DefaultSocket(f.Home())
		if o.Shared {
			sock = probe.SharedSocket(f.Getenv)
		}
	}
	if sock != "none" {
		listen := probe.Listen
		if o.Shared {
			listen = probe.ListenShared
			// every user connects here: no other user may be able to
			// replace the directory or the sockets in it
			if err := probe.EnsureSharedDir(filepath.Dir(sock), os.Geteuid()); err != nil {
				return Envf("%v", err)
			}
		}
		l, err := listen(sock)
		if err != nil {
			return Envf("%v", err)
		}
		defer l.Close()
		cfg.Probes = l.Messages()
	}
	ag, err := agent.New(cfg)
	if err != nil {
		return err
	}
	if h, err := os.Hostname(); err == nil {
		ag.Alerts().Host = h
	}

	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return Envf("listen on %s: %v", o.Listen, err)
	}
	srv := &http.Server{Handler: agent.HostGuard(o.Listen, o.AllowedHosts, ag.Handler(token)), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	addr := ln.Addr().String()
	apiSock := o.APISocket
	if apiSock == "" && o.Shared {
		apiSock = probe.SharedAPISocket(f.Getenv)
	}
	var usrv *http.Server
	var uln net.Listener
	if apiSock != "" && apiSock != "none" {
		mode := os.FileMode(0o600)
		if o.Shared {
			mode = 0o666
			if err := probe.EnsureSharedDir(filepath.Dir(apiSock), os.Geteuid()); err != nil {
				ln.Close()
				return Envf("%v", err)
			}
		}
		if uln, err = listenUnix(apiSock, mode); err != nil {
			ln.Close()
			return Envf("API socket: %v", err)
		}
		defer uln.Close()
		usrv = &http.Server{Handler: ag.SocketHandler(), ConnContext: ag.ConnContext, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	} else {
		apiSock = ""
	}
	if o.JSON {
		_ = f.WriteJSON(map[string]any{"listen": addr, "url": "http://" + addr + "/", "probe_socket": sock, "api_socket": apiSock, "home": f.Home(), "backend": b.Name()})
	} else {
		fmt.Fprintf(f.IO.Out, "vramguard serve: dashboard at http://%s/ (metrics /metrics, API /api/v1/), probe socket %s\n", addr, sock)
		if apiSock != "" {
			fmt.Fprintf(f.IO.Out, "vramguard serve: API socket %s (each user answered as themselves)\n", apiSock)
		}
	}

	errc := make(chan error, 2)
	agentDone := make(chan error, 1)
	go func() { errc <- smp.Run(ctx, ag.SamplerError) }()
	go func() { agentDone <- ag.Run(ctx) }()
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			errc <- err
		}
	}()
	if usrv != nil {
		go func() {
			if err := usrv.Serve(uln); !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
	}
	var first error
	select {
	case <-ctx.Done():
	case first = <-errc:
	case first = <-agentDone:
		agentDone <- nil
	}
	stop()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	if usrv != nil {
		_ = usrv.Shutdown(sctx)
	}
	// Wait for the agent to store what it buffered.
	select {
	case err := <-agentDone:
		if first == nil && err != nil && !errors.Is(err, context.Canceled) {
			first = err
		}
	case <-sctx.Done():
	}
	if first != nil && !errors.Is(first, context.Canceled) {
		return Failf("serve: %v", first)
	}
	return nil
}
