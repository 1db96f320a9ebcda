package doctor

import (
	"bufio"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/vramguard/vramguard/internal/procfs"

	"github.com/vramguard/vramguard/internal/units"
)

// lockFiles are environment locks that pin every package exactly.
var lockFiles = []string{
	"uv.lock", "poetry.lock", "Pipfile.lock", "pdm.lock", "pixi.lock", "conda-lock.yml",
	"environment.yml", "environment.yaml", "requirements.lock",
}

func checkLock(f *facts) Result {
	start := f.env.Cwd
	if start == "" {
		start = "/"
	}
	// Search the project directory and its parents up to the repository
	// root (the first directory holding .git).
	var reqs []string
	for dir := path.Clean(start); ; dir = path.Dir(dir) {
		for _, name := range lockFiles {
			if f.env.exists(path.Join(dir, name)) {
				return okR(fmt.Sprintf("environment lock %s", path.Join(dir, name))).with("lock", path.Join(dir, name))
			}
		}
		for _, pat := range []string{"*.conda-lock.yml", "requirements*.txt", "requirements*.in.lock"} {
			m, _ := filepath.Glob(filepath.Join(f.env.path(dir), pat))
			sort.Strings(m)
			for _, p := range m {
				logical := path.Join(dir, filepath.Base(p))
				if strings.HasSuffix(p, ".conda-lock.yml") {
					return okR("environment lock "+logical).with("lock", logical)
				}
				reqs = append(reqs, logical)
			}
		}
		if len(reqs) > 0 || f.env.exists(path.Join(dir, ".git")) || dir == "/" {
			break
		}
	}
	fix := "commit a lock: `uv lock`, `poetry lock`, `conda env export > environment.yml`, or `pip freeze > requirements.txt`"
	if len(reqs) == 0 {
		return warnR(fmt.Sprintf("no environment lock in %s or its parents up to the repository root: a rebuilt environment may bring another torch or CUDA", start), fix)
	}
	var loose []string
	total := 0
	for _, r := range reqs {
		n, unpinned, err := pinned(f.env.path(r))
		if err != nil {
			continue
		}
		total += n
		for _, u := range unpinned {
			loose = append(loose, fmt.Sprintf("%s (%s)", u, path.Base(r)))
		}
	}
	if len(loose) > 0 {
		return warnR(fmt.Sprintf("%s pin %d of %d requirements; not pinned: %s", strings.Join(reqs, ", "), total-len(loose), total, truncate(strings.Join(loose, ", "), 200)),
			"pin exact versions (`pip freeze > requirements.txt`, `uv pip compile`), or "+fix[len("commit a lock: "):])
	}
	return okR(fmt.Sprintf("%s pin all %d requirements", strings.Join(reqs, ", "), total)).with("lock", reqs[0])
}

// pinned counts requirement lines and lists those not pinned to one version.
func pinned(p string) (int, []string, error) {
	fh, err := os.Open(p)
	if err != nil {
		return 0, nil, err
	}
	defer fh.Close()
	n := 0
	var loose []string
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if i := strings.Index(line, " #"); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "-") || strings.HasPrefix(line, "--") {
			continue // comments, options (-r, -c, --index-url, --hash continuation)
		}
		line = strings.TrimSuffix(line, "\\")
		n++
		spec, _, _ := strings.Cut(line, ";")
		if strings.Contains(spec, "==") || strings.Contains(spec, " @ ") || strings.Contains(spec, "://") {
			continue
		}
		name := strings.FieldsFunc(spec, func(r rune) bool { return strings.ContainsRune("<>=!~[ ", r) })
		if len(name) > 0 {
			loose = append(loose, name[0])
		}
	}
	return n, loose, sc.Err()
}

func readInt(env *Env, p string) (int64, bool) {
	b, err := env.readFile(p)
	if err != nil {
		return 0, false
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return v, err == nil
}

// meminfoField reads one "Key: N kB" line of /proc/meminfo in bytes.
func meminfoField(env *Env, key string) (uint64, bool) {
	b, err := env.readFile("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && k == key {
			f := strings.Fields(v)
			if len(f) == 0 {
				return 0, false
			}
			n, err := strconv.ParseUint(f[0], 10, 64)
			return n * 1024, err == nil
		}
	}
	return 0, false
}

func checkOvercommit(f *facts) Result {
	mode, ok := readInt(f.env, "/proc/sys/vm/overcommit_memory")
	if !ok {
		return naR("cannot read /proc/sys/vm/overcommit_memory")
	}
	switch mode {
	case 0:
		return okR("vm.overcommit_memory=0 (heuristic)").with("mode", mode)
	case 1:
		return okR("vm.overcommit_memory=1 (always)").with("mode", mode)
	}
	ratio, _ := readInt(f.env, "/proc/sys/vm/overcommit_ratio")
	limit, _ := meminfoField(f.env, "CommitLimit")
	total, _ := meminfoField(f.env, "MemTotal")
	ev := fmt.Sprintf("vm.overcommit_memory=2 (strict), overcommit_ratio=%d, CommitLimit %s of %s RAM", ratio, units.FormatBytes(limit), units.FormatBytes(total))
	fix := "sysctl -w vm.overcommit_memory=0 (or raise vm.overcommit_ratio / add swap)"
	if limit < total {
		return failR(ev+": fork() of a large training process (DataLoader workers) and CUDA's large host reservations fail with ENOMEM (\"Cannot allocate memory\")", fix).with("mode", mode)
	}
	return warnR(ev+": every mapping is charged in full, so forking DataLoader workers from a large process can fail with ENOMEM", fix).with("mode", mode)
}

func checkSwap(f *facts) Result {
	mi, err := procfs.FS{Root: f.env.Root}.MemInfo()
	if err != nil {
		return naR("cannot read /proc/meminfo: " + err.Error())
	}
	if mi.SwapTotal == 0 {
		return okR("no swap: when memory runs out the OOM killer ends the job (exit 137) instead of slowing it down")
	}
	used := mi.SwapTotal - min(mi.SwapFree, mi.SwapTotal)
	ev := fmt.Sprintf("swap %s of %s used; %s of %s RAM available", units.FormatBytes(used), units.FormatBytes(mi.SwapTotal), units.FormatBytes(mi.Available), units.FormatBytes(mi.Total))
	switch {
	case used*10 >= mi.SwapTotal*9 && mi.Available*20 < mi.Total:
		return failR(ev+": the host is out of memory now; a job started here is OOM-killed or crawls", "find what holds the memory (ps aux --sort=-rss) before starting the job")
	case used*2 > mi.SwapTotal:
		return warnR(ev+": the host is short of memory; DataLoader workers paging in and out slow training", "reduce num_workers / prefetch_factor, or free memory on the host")
	}
	return okR(ev)
}

// rlimit reads one row of /proc/self/limits: soft and hard, -1 for unlimited.
func rlimit(env *Env, name string) (soft, hard int64, ok bool) {
	b, err := env.readFile("/proc/self/limits")
	if err != nil {
		return 0, 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, name) {
			continue
		}
		fs := strings.Fields(line[len(name):])
		if len(fs) < 2 {
			return 0, 0, false
		}
		parse := func(s string) int64 {
			if s == "unlimited" {
				return -1
			}
			n, _ := strconv.ParseInt(s, 10, 64)
			return n
		}
		return parse(fs[0]), parse(fs[1]), true
	}
	return 0, 0, false
}

func fmtLimit(n int64) string {
	if n < 0 {
		return "unlimited"
	}
	return strconv.FormatInt(n, 10)
}

func checkNofile(f *facts) Result {
	soft, hard, ok := rlimit(f.env, "Max open files")
	if !ok {
		return naR("cannot read /proc/self/limits")
	}
	ev := fmt.Sprintf("open files: soft %s, hard %s", fmtLimit(soft), fmtLimit(hard))
	fix := "ulimit -n 65536 before starting the job"
	if hard >= 0 && hard < 65536 {
		fix = "raise the hard limit (docker run --ulimit nofile=65536:65536, /etc/security/limits.conf, systemd LimitNOFILE=) and then ulimit -n 65536"
	}
	fix += "; or torch.multiprocessing.set_sharing_strategy(\"file_system\")"
	r := okR(ev)
	switch {
	case soft >= 0 && soft < 1024:
		r = failR(ev+": DataLoader workers pass tensors as file descriptors and run out at once (\"received 0 items of ancdata\", \"Too many open files\")", fix)
	case soft >= 0 && soft < 4096:
		r = warnR(ev+": several DataLoader workers with deep prefetching can exhaust it (\"received 0 items of ancdata\")", fix)
	}
	return r.with("soft", soft).with("hard", hard)
}

func checkMemlock(f *facts) Result {
	soft, hard, ok := rlimit(f.env, "Max locked memory")
	if !ok {
		return naR("cannot read /proc/self/limits")
	}
	ev := fmt.Sprintf("locked memory: soft %s, hard %s", limitBytes(soft), limitBytes(hard))
	ib, _ := filepath.Glob(f.env.path("/sys/class/infiniband/*"))
	if soft < 0 {
		return okR(ev).with("soft", soft)
	}
	if len(ib) > 0 {
		return failR(fmt.Sprintf("%s with %s: NCCL must register (lock) its buffers and fails with \"ibv_reg_mr failed: Cannot allocate memory\"", ev, units.Plural(len(ib), "InfiniBand/RDMA device")),
			"docker run --ulimit memlock=-1, or LimitMEMLOCK=infinity / memlock unlimited in /etc/security/limits.conf").with("soft", soft)
	}
	return okR(ev+"; no InfiniBand/RDMA devices, and torch's pinned host memory (cudaHostAlloc) is locked by the driver, not charged to this limit").with("soft", soft)
}

func limitBytes(n int64) string {
	if n < 0 {
		return "unlimited"
	}
	return units.FormatBytes(uint64(n))
}

func checkNUMA(f *facts) Result {
	nodes, _ := filepath.Glob(f.env.path("/sys/devices/system/node/node[0-9]*"))
	if len(nodes) <= 1 {
		return okR(fmt.Sprintf("%s: nothing to place", units.Plural(max(len(nodes), 1), "NUMA node"))).with("nodes", max(len(nodes), 1))
	}
	nodeCPUs := map[int]map[int]bool{}
	for _, n := range nodes {
		id, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(n), "node"))
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(n, "cpulist"))
		if err == nil {
			nodeCPUs[id] = cpuSet(string(b))
		}
	}
	var probs []string
	balancing, _ := readInt(f.env, "/proc/sys/kernel/numa_balancing")
	if balancing == 1 {
		probs = append(probs, "automatic NUMA balancing is on (kernel.numa_balancing=1): page migration stalls host↔GPU copies")
	}
	known := 0
	if f.gpuErr == nil {
		_, list := allowedCPUs(f.env)
		allowed := cpuSet(list)
		for _, d := range f.gpu.Devices {
			if d.PCIBusID == "" {
				continue
			}
			node, ok := readInt(f.env, "/sys/bus/pci/devices/"+sysfsBusID(d.PCIBusID)+"/numa_node")
			if !ok || node < 0 {
				continue
			}
			known++
			near := false
			for c := range nodeCPUs[int(node)] {
				if allowed[c] {
					near = true
					break
				}
			}
			if len(allowed) > 0 && !near {
				probs = append(probs, fmt.Sprintf("GPU %d is on NUMA node %d but this process may only run on CPUs %s", d.Index, node, list))
			}
		}
	}
	ev := fmt.Sprintf("%d NUMA nodes", len(nodes))
	switch {
	case f.gpuErr != nil:
		ev += "; GPU placement unknown (no NVML)"
	case known == 0:
		ev += "; the GPUs' NUMA nodes are not reported"
	default:
		ev += fmt.Sprintf("; %s placed", units.Plural(known, "GPU"))
	}
	if len(probs) > 0 {
		return warnR(ev+": "+strings.Join(probs, "; "),
			"bind each rank near its GPU (numactl --cpunodebind=N --membind=N; see nvidia-smi topo -m) and sysctl -w kernel.numa_balancing=0").with("nodes", len(nodes))
	}
	return okR(ev).with("nodes", len(nodes))
}

func cpuSet(list string) map[int]bool {
	out := map[int]bool{}
	for _, part := range strings.Split(strings.TrimSpace(list), ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			continue
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				continue
			}
		}
		for c := a; c <= b; c++ {
			out[c] = true
		}
	}
	return out
}

// sysfsBusID turns NVML's "00000000:07:00.0" into sysfs's "0000:07:00.0".
func sysfsBusID(id string) string {
	id = strings.ToLower(id)
	if dom, rest, ok := strings.Cut(id, ":"); ok && len(dom) > 4 {
		id = dom[len(dom)-4:] + ":" + rest
	}
	return id
}
