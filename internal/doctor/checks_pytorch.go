package doctor

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/vramguard/vramguard/internal/lazyre"
	"github.com/vramguard/vramguard/internal/procfs"
	"github.com/vramguard/vramguard/internal/units"
)

// torchGate returns a result when torch could not be probed.
func torchGate(f *facts) *Result {
	if f.torchErr != nil || f.torch == nil || !f.torch.Importable {
		r := naR("torch not importable (see pytorch.import)")
		return &r
	}
	return nil
}

func buildKind(t *Torch) string {
	switch {
	case t.CUDA != "":
		return "CUDA " + t.CUDA + " build"
	case t.HIP != "":
		return "ROCm " + t.HIP + " build"
	}
	return "CPU-only build"
}

func checkTorchImport(f *facts) Result {
	py := f.opts.Python
	switch {
	case errors.Is(f.torchErr, errNoPython):
		return failR("no Python interpreter to probe (python3 is not on PATH)",
			"pass --python PATH: the interpreter your training job runs with")
	case errors.Is(f.torchErr, ErrProbeTimeout):
		return failR(fmt.Sprintf("`%s -c 'import torch'` did not finish within %s", py, f.opts.PythonTimeout),
			"run it by hand to see where it hangs: a stuck network filesystem on sys.path, or a driver in a bad state (does nvidia-smi answer?)")
	case f.torchErr != nil:
		return failR("could not run the torch probe: "+f.torchErr.Error(),
			"check that --python names a working interpreter")
	}
	t := f.torch
	who := t.Executable
	if who == "" {
		who = py
	}
	if !t.Importable {
		fix := "install torch into that environment, or pass --python for the interpreter your job uses"
		if alts := torchInterpreters(f.env, py, t.Executable); len(alts) > 0 {
			fix = "try --python " + alts[0] + " (torch is installed there)"
		}
		return failR(fmt.Sprintf("torch not importable by %s: %s", who, t.ImportError), fix).
			with("executable", who)
	}
	ev := fmt.Sprintf("torch %s (%s) with %s (Python %s)", t.Version, buildKind(t), who, t.PythonVersion)
	if t.ImportSeconds > 0 {
		ev += fmt.Sprintf("; import took %.1f s", t.ImportSeconds)
	}
	return okR(ev).with("version", t.Version).with("cuda", t.CUDA).with("executable", who)
}

var versionRE = lazyre.New(`^(\d+)\.(\d+)`)

// majorMinor parses "12.1" or "12.1.105" into 12, 1.
func majorMinor(s string) (int, int, bool) {
	m := versionRE.FindStringSubmatch(s)
	if m == nil {
		return 0, 0, false
	}
	a, _ := strconv.Atoi(m[1])
	b, _ := strconv.Atoi(m[2])
	return a, b, true
}

func checkTorchCUDA(f *facts) Result {
	if r := torchGate(f); r != nil {
		return *r
	}
	t := f.torch
	haveGPU := f.gpuErr == nil && len(f.gpu.Devices) > 0
	switch {
	case t.HIP != "":
		return naR("ROCm build (HIP " + t.HIP + "): the NVIDIA driver checks do not apply")
	case t.CUDA == "" && haveGPU:
		return failR(fmt.Sprintf("torch %s is a CPU-only build on a machine with %s: the job would train on the CPU", t.Version, units.Plural(len(f.gpu.Devices), "NVIDIA GPU")),
			"install a CUDA build no newer than the driver supports (CUDA "+CUDAVersionString(f.gpu.CUDADriverVersion)+"), e.g. pip install torch --index-url https://download.pytorch.org/whl/cu121")
	case t.CUDA == "":
		return okR(fmt.Sprintf("torch %s is a CPU-only build and there is no NVIDIA driver here: nothing to match", t.Version)).with("cuda", "")
	case f.gpuErr != nil && noDriver(f.gpuErr):
		return warnR(fmt.Sprintf("torch is built for CUDA %s but there is no NVIDIA driver here: torch.cuda.is_available() is False", t.CUDA),
			"run on a GPU machine; in a container pass the GPUs through (docker run --gpus all)")
	case f.gpuErr != nil:
		return naR("NVML failed (see gpu.nvml)")
	}
	tmaj, tmin, ok1 := majorMinor(t.CUDA)
	dv := f.gpu.CUDADriverVersion
	dmaj, dmin := dv/1000, (dv%1000)/10
	if !ok1 || dv <= 0 {
		return warnR(fmt.Sprintf("cannot compare torch's CUDA %q with the driver's %s", t.CUDA, CUDAVersionString(dv)),
			"compare nvidia-smi's \"CUDA Version\" with torch.version.cuda by hand")
	}
	ev := fmt.Sprintf("torch %s is built for CUDA %s; driver %s supports up to %d.%d", t.Version, t.CUDA, f.gpu.DriverVersion, dmaj, dmin)
	fix := fmt.Sprintf("upgrade the NVIDIA driver to one that supports CUDA %d.%d, or install a torch built for CUDA %d.%d or older", tmaj, tmin, dmaj, dmin)
	switch {
	case tmaj > dmaj:
		return failR(ev+": the driver is too old, CUDA calls fail with \"CUDA driver version is insufficient\"", fix)
	case tmaj == dmaj && tmin > dmin:
		return warnR(ev+": runs through minor-version compatibility, but PTX JIT and newer features fail", fix)
	case haveGPU && !t.CUDAAvailable:
		ev := fmt.Sprintf("torch.cuda.is_available() is False although the driver sees %s", units.Plural(len(f.gpu.Devices), "GPU"))
		if t.CUDAError != "" {
			ev += ": " + t.CUDAError
		}
		if v := f.env.getenv("CUDA_VISIBLE_DEVICES"); v != "" {
			ev += fmt.Sprintf(" (CUDA_VISIBLE_DEVICES=%s)", v)
		}
		return failR(ev, "check CUDA_VISIBLE_DEVICES and that /dev/nvidia* is accessible to this user")
	}
	return okR(ev)
}

func checkCUDNN(f *facts) Result {
	if r := torchGate(f); r != nil {
		return *r
	}
	t := f.torch
	if t.CUDA == "" {
		return naR("torch " + t.Version + " is a " + buildKind(t) + ": no cuDNN to check")
	}
	if t.CUDNN <= 0 {
		ev := "torch is built for CUDA " + t.CUDA + " but cuDNN is not loadable"
		if t.CUDNNError != "" {
			ev += ": " + t.CUDNNError
		}
		return warnR(ev+"; convolutions fall back to slow kernels or fail",
			"install the cuDNN that torch expects (pip: nvidia-cudnn-cu"+strings.SplitN(t.CUDA, ".", 2)[0]+"), and check that LD_LIBRARY_PATH does not shadow it")
	}
	return okR("cuDNN "+cudnnString(t.CUDNN)).with("cudnn", t.CUDNN)
}

var cudartVersionRE = lazyre.New(`libcudart\.so\.(\d+)(?:\.(\d+))?`)

func checkCudart(f *facts) Result {
	if r := torchGate(f); r != nil {
		return *r
	}
	t := f.torch
	if tmaj, tmin, ok := majorMinor(t.CUDA); ok {
		for _, l := range t.CudartLoaded {
			m := cudartVersionRE.FindStringSubmatch(filepath.Base(l))
			if m == nil || m[2] == "" {
				continue
			}
			lmaj, _ := strconv.Atoi(m[1])
			lmin, _ := strconv.Atoi(m[2])
			if lmaj == tmaj && lmin < tmin {
				return failR(fmt.Sprintf("torch is built for CUDA %s but loaded the older runtime %s: expect \"undefined symbol\" errors", t.CUDA, l),
					"remove "+filepath.Dir(l)+" from LD_LIBRARY_PATH (torch brings its own runtime)")
			}
		}
	}
	switch n := len(t.CudartFiles); {
	case n == 0:
		return okR("no libcudart reachable by " + t.Executable + " (" + buildKind(t) + ")")
	case n == 1:
		return okR("one CUDA runtime: " + t.CudartFiles[0])
	}
	ev := fmt.Sprintf("%d CUDA runtime libraries reachable by %s: %s", len(t.CudartFiles), t.Executable, strings.Join(t.CudartFiles, ", "))
	if len(t.CudartLoaded) > 0 {
		ev += "; loaded: " + strings.Join(t.CudartLoaded, ", ")
	}
	return warnR(ev, "keep one: drop other toolkits' directories from LD_LIBRARY_PATH, or use a clean virtual environment").
		with("cudart", t.CudartFiles)
}

func checkAllocConf(f *facts) Result {
	cudaConf := f.env.getenv("PYTORCH_CUDA_ALLOC_CONF")
	newConf := f.env.getenv("PYTORCH_ALLOC_CONF")
	if cudaConf == "" && newConf == "" {
		return okR("PYTORCH_CUDA_ALLOC_CONF and PYTORCH_ALLOC_CONF are not set: allocator defaults")
	}
	var notes []AllocProblem
	name, conf := "PYTORCH_CUDA_ALLOC_CONF", cudaConf
	if newConf != "" {
		name, conf = "PYTORCH_ALLOC_CONF", newConf
		if cudaConf != "" && cudaConf != newConf {
			notes = append(notes, AllocProblem{
				Text: "PYTORCH_ALLOC_CONF and PYTORCH_CUDA_ALLOC_CONF are both set and differ: torch 2.9+ reads the first, older releases only the second",
				Fix:  "set one of them",
			})
		}
		if f.torch != nil && f.torch.Importable && cudaConf == "" {
			if maj, min, ok := majorMinor(f.torch.Version); ok && (maj < 2 || maj == 2 && min < 9) {
				notes = append(notes, AllocProblem{
					Text: "torch " + f.torch.Version + " reads only PYTORCH_CUDA_ALLOC_CONF, so PYTORCH_ALLOC_CONF is ignored",
					Fix:  "rename it to PYTORCH_CUDA_ALLOC_CONF",
				})
			}
		}
	}
	set := fmt.Sprintf("%s=%s", name, conf)
	opts, err := ParseAllocConf(conf)
	if err != nil {
		return failR(set+": "+err.Error()+"; torch refuses it at the first CUDA allocation",
			"write it as key:value pairs separated by commas, e.g. expandable_segments:True,max_split_size_mb:512")
	}
	probs := append(AllocProblems(opts), notes...)
	if len(probs) == 0 {
		return okR(set)
	}
	var texts, fixes []string
	fatal := false
	for _, p := range probs {
		texts = append(texts, p.Text)
		if p.Fix != "" {
			fixes = append(fixes, p.Fix)
		}
		fatal = fatal || p.Fatal
	}
	if fatal {
		return failR(set+": "+strings.Join(texts, "; "),
			"fix the value(s); the job would die at its first CUDA allocation (see the PyTorch CUDA semantics notes on PYTORCH_CUDA_ALLOC_CONF)")
	}
	return warnR(set+": "+strings.Join(texts, "; "), strings.Join(fixes, "; "))
}

// checkFork looks for running processes that initialised CUDA and then
// forked children with their own command line: DataLoader workers started
// with the "fork" method after the model moved to the GPU. A worker that
// touches CUDA then dies with "Cannot re-initialize CUDA in forked
// subprocess". Only live processes can show it, so it is detected where it
// is running, not predicted.
func checkFork(f *facts) Result {
	fs := procfs.FS{Root: f.env.Root}
	procs, err := fs.All()
	if err != nil {
		return naR("cannot list processes: " + err.Error())
	}
	children := map[int][]procfs.Proc{}
	for _, p := range procs {
		children[p.PPID] = append(children[p.PPID], p)
	}
	mapsCUDA := func(pid int) bool {
		b, err := f.env.readFile(fmt.Sprintf("/proc/%d/maps", pid))
		return err == nil && strings.Contains(string(b), "libcuda.so")
	}
	var hits []string
	for _, p := range procs {
		kids := children[p.PID]
		if len(kids) == 0 {
			continue
		}
		cmd, err := fs.Cmdline(p.PID)
		if err != nil || len(cmd) == 0 {
			continue
		}
		var forked []int
		for _, k := range kids {
			kc, err := fs.Cmdline(k.PID)
			if err == nil && strings.Join(kc, "\x00") == strings.Join(cmd, "\x00") {
				forked = append(forked, k.PID)
			}
		}
		if len(forked) == 0 || !mapsCUDA(p.PID) || !mapsCUDA(forked[0]) {
			continue
		}
		hits = append(hits, fmt.Sprintf("pid %d (%s) initialised CUDA and forked %s (pid %v)", p.PID, truncate(strings.Join(cmd, " "), 60), units.Plural(len(forked), "worker"), forked))
	}
	method := ""
	if f.torch != nil && f.torch.StartMethod != "" {
		method = "; this Python's default start method is " + f.torch.StartMethod
	}
	if len(hits) > 0 {
		return warnR(strings.Join(hits, "; ")+": a worker that touches CUDA dies with \"Cannot re-initialize CUDA in forked subprocess\""+method,
			"keep CUDA out of Dataset/collate_fn, or start workers with DataLoader(..., multiprocessing_context=\"spawn\") or \"forkserver\"")
	}
	if len(procs) == 1 {
		return okR(fmt.Sprintf("the one running process forked no workers after initialising CUDA%s", method))
	}
	return okR(fmt.Sprintf("none of the %d running processes forked workers after initialising CUDA%s", len(procs), method))
}

// cudnnString turns torch.backends.cudnn.version() into "8.9.2" or "9.1.0":
// cuDNN 8 encodes 1000*major+100*minor+patch, cuDNN 9 10000*major+100*minor+patch.
func cudnnString(v int) string {
	if v >= 10000 {
		return fmt.Sprintf("%d.%d.%d", v/10000, (v%10000)/100, v%100)
	}
	return fmt.Sprintf("%d.%d.%d", v/1000, (v%1000)/100, v%100)
}
