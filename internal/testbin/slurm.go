package testbin

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The Debian packages of a real Slurm cluster: its daemons and commands,
// and the authentication they share.
var (
	Slurm = Dep{Package: "slurm-wlm", Programs: []string{"slurmctld", "slurmd", "slurmstepd", "sbatch", "srun", "scancel", "scontrol", "squeue", "sinfo"}}
	Munge = Dep{Package: "munge", Programs: []string{"munged"}}
)

// SlurmCluster is a real Slurm cluster on this machine: its own munged,
// slurmctld and two slurmd, nodes n1 and n2 (both this host, each on its own
// port), every file of it in Dir. StartSlurm starts one; the test's cleanup
// cancels its jobs and stops its daemons by PID.
type SlurmCluster struct {
	// Dir holds the configuration, state, spools, logs and the scripts
	// Sbatch writes.
	Dir string
	// Conf is slurm.conf; Env (this process's environment with SLURM_CONF
	// set to it) is what its commands run with.
	Conf string
	Env  []string
	// Nodes are the nodes' names.
	Nodes []string

	t       testing.TB
	daemons []*exec.Cmd
}

// SlurmNodes are the names of a SlurmCluster's nodes.
var SlurmNodes = []string{"n1", "n2"}

// slurmDefaults is the configuration every cluster starts from. The
// plugins are those that work where cgroups are v1 and not delegated (no
// cgroup plugin at all: processes are tracked by their parentage); a job's
// end is quick (KillWait 5 s, no overtime) so that tests of time limits
// stay short.
var slurmDefaults = map[string]string{
	"ProctrackType":           "proctrack/linuxproc",
	"TaskPlugin":              "task/none",
	"JobAcctGatherType":       "jobacct_gather/none",
	"AccountingStorageType":   "accounting_storage/none",
	"JobCompType":             "jobcomp/none",
	"SchedulerType":           "sched/backfill",
	"SchedulerParameters":     "sched_interval=1",
	"SelectType":              "select/cons_tres",
	"SelectTypeParameters":    "CR_Core",
	"MpiDefault":              "none",
	"AuthType":                "auth/munge",
	"CredType":                "cred/munge",
	"SlurmUser":               "root",
	"SlurmdUser":              "root",
	"ReturnToService":         "2",
	"KillWait":                "5",
	"OverTimeLimit":           "0",
	"InactiveLimit":           "0",
	"MinJobAge":               "600",
	"SlurmctldTimeout":        "30",
	"SlurmdTimeout":           "30",
	"MessageTimeout":          "10",
	"Waittime":                "0",
	"CompleteWait":            "0",
	"PropagateResourceLimits": "NONE",
}

// StartSlurm starts a SlurmCluster and returns once both nodes are idle
// (about 5 s). conf adds or overrides slurm.conf settings ("KillWait=10").
// It needs root (slurmd starts jobs as their users) and fails t, in one
// line, without it or without the packages.
func StartSlurm(t testing.TB, conf ...string) *SlurmCluster {
	t.Helper()
	Need(t, Slurm, Munge)
	NeedRoot(t, "a Slurm cluster (slurmd runs jobs as their users)")
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	host, _, _ = strings.Cut(host, ".")
	// Unix socket paths are short (slurmstepd's live in the spool): a
	// short directory, not t.TempDir()'s, which is named for the test.
	dir, err := os.MkdirTemp("", "slurm")
	if err != nil {
		t.Fatal(err)
	}
	// munged refuses a socket directory others cannot enter; the key is
	// the cluster's own.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	c := &SlurmCluster{Dir: dir, Conf: filepath.Join(dir, "slurm.conf"), Nodes: SlurmNodes, t: t}
	c.Env = append(os.Environ(), "SLURM_CONF="+c.Conf)
	t.Cleanup(c.stop)
	for _, d := range []string{"state", "spool/n1", "spool/n2"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	key := make([]byte, 1024)
	f, err := os.Open("/dev/urandom")
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.Read(key)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "munge.key"), key, 0o400); err != nil {
		t.Fatal(err)
	}
	ports := freePorts(t, 3)
	settings := map[string]string{}
	for k, v := range slurmDefaults {
		settings[k] = v
	}
	for k, v := range map[string]string{
		"ClusterName":   "vgtest" + strconv.Itoa(ports[0]),
		"SlurmctldHost": host,
		"SlurmctldPort": strconv.Itoa(ports[0]),
		// cred_expire: how long a requeued job waits before it starts
		// again (120 s by default); scontrol update StartTime=now
		// instead races Slurm's own revocation of the first start's
		// credential ("Job credential revoked")
		"AuthInfo":          "socket=" + filepath.Join(dir, "munge.sock") + ",cred_expire=10",
		"StateSaveLocation": filepath.Join(dir, "state"),
		"SlurmdSpoolDir":    filepath.Join(dir, "spool", "%n"),
		"SlurmctldPidFile":  filepath.Join(dir, "slurmctld.pid"),
		"SlurmdPidFile":     filepath.Join(dir, "slurmd-%n.pid"),
		"SlurmctldLogFile":  filepath.Join(dir, "slurmctld.log"),
		"SlurmdLogFile":     filepath.Join(dir, "slurmd-%n.log"),
	} {
		settings[k] = v
	}
	for _, kv := range conf {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			t.Fatalf("slurm.conf setting %q is not KEY=VALUE", kv)
		}
		settings[k] = v
	}
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%s\n", k, settings[k])
	}
	for i, n := range c.Nodes {
		fmt.Fprintf(&b, "NodeName=%s NodeHostname=%s Port=%d CPUs=2 RealMemory=4000 State=UNKNOWN\n", n, host, ports[1+i])
	}
	fmt.Fprintf(&b, "PartitionName=debug Nodes=%s Default=YES MaxTime=INFINITE State=UP\n", strings.Join(c.Nodes, ","))
	if err := os.WriteFile(c.Conf, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.conf"), []byte("CgroupPlugin=cgroup/v1\nCgroupAutomount=no\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	c.daemon("munged", "-F", "--force", "--socket="+filepath.Join(dir, "munge.sock"), "--key-file="+filepath.Join(dir, "munge.key"),
		"--pid-file="+filepath.Join(dir, "munged.pid"), "--seed-file="+filepath.Join(dir, "munge.seed"), "--log-file="+filepath.Join(dir, "munged.log"))
	WaitFor(t, 10*time.Second, "munged's socket", func() bool {
		_, err := os.Stat(filepath.Join(dir, "munge.sock"))
		return err == nil
	}, c.dumpLogs)
	c.daemon("slurmctld", "-D", "-i", "-f", c.Conf)
	for _, n := range c.Nodes {
		c.daemon("slurmd", "-D", "-N", n, "-f", c.Conf)
	}
	WaitFor(t, 30*time.Second, "both Slurm nodes idle", func() bool {
		out, err := c.Command("sinfo", "-h", "-N", "-o", "%N %T").Output()
		return err == nil && strings.Count(string(out), "idle") == len(c.Nodes)
	}, c.dumpLogs)
	return c
}

// daemon starts one of the cluster's daemons in the foreground, its output
// into DIR/NAME.out; it dies with the test process.
func (c *SlurmCluster) daemon(name string, args ...string) {
	c.t.Helper()
	out, err := os.Create(filepath.Join(c.Dir, fmt.Sprintf("%s-%d.out", name, len(c.daemons))))
	if err != nil {
		c.t.Fatal(err)
	}
	defer out.Close()
	cmd := exec.Command(name, args...)
	cmd.Env = c.Env
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("start %s: %v", name, err)
	}
	c.daemons = append(c.daemons, cmd)
}

// Command is a Slurm command (sbatch, srun, scontrol...) of this cluster,
// killed if it still runs Timeout from now or when the test ends.
func (c *SlurmCluster) Command(name string, args ...string) *exec.Cmd {
	return Command(c.t, c.Env, name, args...)
}

// run runs a Slurm command and returns its stdout; it fails the test when
// the command fails.
func (c *SlurmCluster) run(name string, args ...string) string {
	c.t.Helper()
	r := Run(c.t, c.Command(name, args...))
	if r.Code != 0 {
		c.t.Fatalf("%s: exit %d\n%s%s", r.command(), r.Code, r.Stdout, r.Stderr)
	}
	return r.Stdout
}

// Sbatch writes script (a batch script as a user writes one, #SBATCH
// lines and all) into the cluster's directory and submits it from dir
// (the job's working directory; "" for the cluster's), with args before
// the script. It returns the job's id.
func (c *SlurmCluster) Sbatch(dir, script string, args ...string) string {
	c.t.Helper()
	f, err := os.CreateTemp(c.Dir, "job-*.sh")
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := f.WriteString(script); err != nil {
		c.t.Fatal(err)
	}
	f.Close()
	if dir == "" {
		dir = c.Dir
	}
	cmd := c.Command("sbatch", append(append([]string{"--parsable", "--chdir=" + dir}, args...), f.Name())...)
	r := Run(c.t, cmd)
	if r.Code != 0 {
		c.t.Fatalf("%s: exit %d\n%s", r.command(), r.Code, r.Stderr)
	}
	id, _, _ := strings.Cut(strings.TrimSpace(r.Stdout), ";")
	return id
}

// Srun runs srun with args to its end.
func (c *SlurmCluster) Srun(args ...string) Result {
	c.t.Helper()
	return Run(c.t, c.Command("srun", args...))
}

// Scancel runs scancel with args; it fails the test when scancel fails.
func (c *SlurmCluster) Scancel(args ...string) {
	c.t.Helper()
	c.run("scancel", args...)
}

// Scontrol runs scontrol with args and returns what it printed; it fails
// the test when scontrol fails.
func (c *SlurmCluster) Scontrol(args ...string) string {
	c.t.Helper()
	return c.run("scontrol", args...)
}

// Squeue runs squeue with args and returns what it printed.
func (c *SlurmCluster) Squeue(args ...string) string {
	c.t.Helper()
	return c.run("squeue", args...)
}

// Job is the record scontrol keeps of job id, as KEY=VALUE (JobState,
// NodeList, ExitCode, Reason, RunTime...); nil once slurmctld forgot it.
func (c *SlurmCluster) Job(id string) map[string]string {
	c.t.Helper()
	out, err := c.Command("scontrol", "-o", "show", "job", id).Output()
	if err != nil {
		return nil
	}
	job := map[string]string{}
	for _, f := range strings.Fields(string(out)) {
		if k, v, ok := strings.Cut(f, "="); ok {
			job[k] = v
		}
	}
	return job
}

// slurmDone are the states of a job that ended.
var slurmDone = map[string]bool{"COMPLETED": true, "CANCELLED": true, "FAILED": true, "TIMEOUT": true,
	"NODE_FAIL": true, "PREEMPTED": true, "OUT_OF_MEMORY": true, "BOOT_FAIL": true, "DEADLINE": true}

// WaitJob waits up to d for job id to end and returns its record then.
func (c *SlurmCluster) WaitJob(id string, d time.Duration) map[string]string {
	c.t.Helper()
	var job map[string]string
	WaitFor(c.t, d, "Slurm job "+id+" to end", func() bool {
		job = c.Job(id)
		return job != nil && slurmDone[job["JobState"]]
	}, c.dumpLogs)
	return job
}

// WaitRunning waits up to d for job id to run and returns its record then.
func (c *SlurmCluster) WaitRunning(id string, d time.Duration) map[string]string {
	c.t.Helper()
	var job map[string]string
	WaitFor(c.t, d, "Slurm job "+id+" to run", func() bool {
		job = c.Job(id)
		if job != nil && slurmDone[job["JobState"]] {
			c.t.Fatalf("Slurm job %s ended (%s) before it was seen running", id, job["JobState"])
		}
		return job != nil && job["JobState"] == "RUNNING"
	}, c.dumpLogs)
	return job
}

// dumpLogs logs the daemons' logs, for a test that failed.
func (c *SlurmCluster) dumpLogs() {
	logs, _ := filepath.Glob(filepath.Join(c.Dir, "*.log"))
	outs, _ := filepath.Glob(filepath.Join(c.Dir, "*.out"))
	for _, l := range append(logs, outs...) {
		b, _ := os.ReadFile(l)
		if len(b) > 4000 {
			b = b[len(b)-4000:]
		}
		c.t.Logf("%s:\n%s", filepath.Base(l), b)
	}
}

// stop cancels every job, then stops the daemons and what they left (the
// job steps' slurmstepd) by PID, and removes the directory.
func (c *SlurmCluster) stop() {
	if len(c.daemons) > 1 {
		sq := exec.Command("squeue", "-h", "-o", "%i")
		sq.Env = c.Env
		if out, err := sq.Output(); err == nil && len(bytes.TrimSpace(out)) > 0 {
			cmd := exec.Command("scancel", append([]string{"--full", "--signal=KILL"}, strings.Fields(string(out))...)...)
			cmd.Env = c.Env
			_ = cmd.Run()
		}
	}
	for i := len(c.daemons) - 1; i >= 0; i-- {
		_ = c.daemons[i].Process.Signal(syscall.SIGTERM)
	}
	done := make(chan struct{})
	go func() {
		for _, d := range c.daemons {
			_ = d.Wait()
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		for _, d := range c.daemons {
			_ = d.Process.Kill()
		}
		<-done
	}
	// slurmstepd outlives slurmd: each names this cluster's
	// configuration in its environment.
	for _, pid := range c.stepds() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if c.t.Failed() {
		c.dumpLogs()
	}
	// a step killed last may still be leaving its spool: try again
	for i := 0; i < 10 && os.RemoveAll(c.Dir) != nil; i++ {
		time.Sleep(100 * time.Millisecond)
	}
}

// stepds are the PIDs of the processes that run with this cluster's
// configuration: its slurmstepd and their jobs.
func (c *SlurmCluster) stepds() []int {
	ents, _ := os.ReadDir("/proc")
	want := []byte("SLURM_CONF=" + c.Conf + "\x00")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err == nil && bytes.Contains(env, want) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// freePorts returns n TCP ports free on this machine now.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ports []int
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", ":0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		ln.Close()
	}
	return ports
}
