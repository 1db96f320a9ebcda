package doctor

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/vramguard/vramguard/internal/procfs"

	"github.com/vramguard/vramguard/internal/units"
)

func checkContainer(f *facts) Result {
	c := f.container
	if !c.Inside {
		return okR("not inside a container").with("inside", false)
	}
	return okR(fmt.Sprintf("inside a container (%s: %s)", c.Kind, c.Evidence)).
		with("inside", true).with("kind", c.Kind)
}

// Thresholds for /dev/shm. DataLoader workers hand every batch to the main
// process through shared memory; a few batches of images in flight per
// worker outgrow Docker's 64 MiB default at once ("bus error", "unable to
// write to file </torch_...>: No space left on device").
const (
	shmFail = 256 << 20
	shmWarn = 1 << 30
)

func checkShm(f *facts) Result {
	var size uint64
	src := ""
	if f.env.Statfs != nil {
		if st, err := f.env.Statfs("/dev/shm"); err == nil && st.TotalBytes > 0 {
			size, src = st.TotalBytes, "statfs"
		}
	}
	if size == 0 {
		if m, ok := mountFor(f.mounts, "/dev/shm"); ok && m.MountPoint == "/dev/shm" {
			if v, ok := mountOption(m, "size"); ok {
				size, _ = units.ParseBytes(v)
				src = "mount option size=" + v
			}
		}
	}
	fix := "docker run --shm-size=8g (or --ipc=host); Kubernetes: mount an emptyDir with medium: Memory at /dev/shm; or DataLoader(num_workers=0)"
	if size == 0 {
		if !f.env.exists("/dev/shm") {
			return failR("/dev/shm does not exist: torch.multiprocessing and DataLoader workers need it", fix)
		}
		return warnR("cannot tell the size of /dev/shm", "check with df -h /dev/shm")
	}
	ev := fmt.Sprintf("/dev/shm is %s", units.FormatBytes(size))
	if size == 64<<20 {
		ev += " (Docker's default)"
	}
	r := okR(ev)
	switch {
	case size < shmFail:
		r = failR(ev+": DataLoader workers fail with \"bus error\" or \"No space left on device\" as soon as a few batches are in flight", fix)
	case size < shmWarn:
		r = warnR(ev+": enough for small batches only; several workers with image batches and prefetching outgrow it", fix)
	}
	return r.with("bytes", size).with("source", src)
}

func checkMemLimit(f *facts) Result {
	mi, err := procfs.FS{Root: f.env.Root}.MemInfo()
	host := mi.Total
	l := f.cgroup
	if l.MemoryBytes == 0 {
		if err != nil {
			return okR("no cgroup memory limit")
		}
		return okR(fmt.Sprintf("no cgroup memory limit; the host has %s", units.FormatBytes(host)))
	}
	ev := fmt.Sprintf("cgroup memory limit %s (%s)", units.FormatBytes(l.MemoryBytes), l.MemoryFile)
	if host > 0 {
		ev += fmt.Sprintf(" on a host with %s", units.FormatBytes(host))
	}
	r := okR(ev)
	fix := "raise it (docker run --memory=32g, Kubernetes resources.limits.memory), or use fewer DataLoader workers and a smaller prefetch_factor"
	switch {
	case l.MemoryBytes < 1<<30:
		r = failR(ev+": below 1 GiB, Python with torch and one DataLoader worker do not fit; the kernel OOM-kills the job (exit 137)", fix)
	case host == 0 || l.MemoryBytes < host:
		r = warnR(ev+": the kernel OOM-kills the job (exit 137) when it, its DataLoader workers and pinned buffers pass the limit, long before the host runs out", fix)
	}
	return r.with("limit_bytes", l.MemoryBytes).with("host_bytes", host)
}

// hostCPUs counts the machine's online CPUs; os.cpu_count() reports this
// number even inside a container with a CPU quota.
func hostCPUs(env *Env) int {
	if b, err := env.readFile("/sys/devices/system/cpu/online"); err == nil {
		if n := len(cpuSet(string(b))); n > 0 {
			return n
		}
	}
	if b, err := env.readFile("/proc/cpuinfo"); err == nil {
		n := 0
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "processor") {
				n++
			}
		}
		return n
	}
	return 0
}

// allowedCPUs is the size of this process's CPU affinity (cpuset).
func allowedCPUs(env *Env) (int, string) {
	b, err := env.readFile("/proc/self/status")
	if err != nil {
		return 0, ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && k == "Cpus_allowed_list" {
			v = strings.TrimSpace(v)
			return len(cpuSet(v)), v
		}
	}
	return 0, ""
}

func checkCPULimit(f *facts) Result {
	host := hostCPUs(f.env)
	allowed, list := allowedCPUs(f.env)
	eff := float64(host)
	var why []string
	if allowed > 0 && (host == 0 || allowed < host) {
		eff = float64(allowed)
		why = append(why, fmt.Sprintf("cpuset %s (%d CPUs)", list, allowed))
	}
	if q := f.cgroup.CPUs; q > 0 && (eff == 0 || q < eff) {
		eff = q
		why = append(why, fmt.Sprintf("CPU quota %s CPUs (%s)", fmtCPUs(q), f.cgroup.CPUFile))
	}
	if len(why) == 0 {
		return okR(fmt.Sprintf("no CPU limit; %d CPUs", host)).with("host_cpus", host)
	}
	ev := strings.Join(why, ", ") + fmt.Sprintf(" on a host with %d CPUs", host)
	n := fmtCPUs(eff)
	if eff >= 1 {
		n = fmtCPUs(float64(int(eff)))
	}
	fix := fmt.Sprintf("size the job to the limit: DataLoader(num_workers<=%s) and OMP_NUM_THREADS=%s (torch.set_num_threads), or raise the limit", n, n)
	r := okR(ev).with("host_cpus", host).with("effective_cpus", eff)
	switch {
	case eff < 1:
		r = failR(ev+": less than one CPU; the Python loop and data loading will starve the GPU",
			"give the job at least one whole CPU per GPU plus one per DataLoader worker (docker run --cpus=4, Kubernetes resources.limits.cpu)").with("effective_cpus", eff)
	case host > 0 && eff < float64(host):
		r = warnR(ev+fmt.Sprintf(": os.cpu_count() still says %d, so num_workers and thread pools sized from it oversubscribe and get throttled", host), fix).
			with("effective_cpus", eff)
	}
	return r
}

func checkPIDNS(f *facts) Result {
	c := f.container
	if !c.Inside {
		return okR("not in a container: NVML's PIDs are this machine's PIDs")
	}
	if !c.OwnPIDNS {
		return okR(fmt.Sprintf("the container shares the host's PID namespace (PID 1 is %s)", c.PID1))
	}
	if f.gpuErr != nil {
		return naR(fmt.Sprintf("own PID namespace (PID 1 is %s), but no GPUs to map PIDs for", c.PID1))
	}
	return warnR(fmt.Sprintf("the container has its own PID namespace (PID 1 is %s): NVML reports host PIDs, so GPU memory cannot be attributed to processes here", c.PID1),
		"run `vramguard top` on the host, or start the container with --pid=host (Kubernetes: hostPID: true)")
}

// fmtCPUs prints a CPU count without trailing zeros ("2", "0.5").
func fmtCPUs(c float64) string {
	if c == math.Trunc(c) {
		return strconv.FormatFloat(c, 'f', 0, 64)
	}
	return strconv.FormatFloat(c, 'f', 2, 64)
}
