package doctor

import (
	"fmt"
	"sort"
	"strings"

	"github.com/vramguard/vramguard/internal/gpu"
	"github.com/vramguard/vramguard/internal/procfs"

	"github.com/vramguard/vramguard/internal/units"
)

// gpuGate returns a non-nil result when the GPU checks cannot run: NVML is
// absent (n/a) or failed (n/a here; gpu.nvml carries the failure).
func gpuGate(f *facts) *Result {
	if f.gpuErr == nil {
		return nil
	}
	r := naR("NVML not available (see gpu.nvml)")
	if !noDriver(f.gpuErr) {
		r = naR("NVML failed (see gpu.nvml)")
	}
	return &r
}

func checkNVML(f *facts) Result {
	if f.gpuErr != nil {
		if noDriver(f.gpuErr) {
			ev := "NVML not found (libnvidia-ml.so.1 could not be loaded): no NVIDIA driver here, so the GPU checks do not apply"
			if msg := f.gpuErr.Error(); msg != gpu.ErrNoDriver.Error() {
				ev = "NVML not available: " + msg + "; the GPU checks do not apply"
			}
			return naR(ev)
		}
		return failR("NVML loaded but did not answer: "+f.gpuErr.Error(),
			"run nvidia-smi; \"Driver/library version mismatch\" means the kernel module and the user-space driver differ after an upgrade: reboot (or reload the nvidia modules)")
	}
	s := f.gpu
	if len(s.Devices) == 0 {
		return warnR(fmt.Sprintf("NVML loaded (driver %s) but it sees no GPUs", s.DriverVersion),
			"check `nvidia-smi -L`; in a container pass the GPUs through (docker run --gpus all, NVIDIA_VISIBLE_DEVICES, Kubernetes nvidia.com/gpu)").
			with("devices", 0)
	}
	names := map[string]int{}
	for _, d := range s.Devices {
		names[d.Name]++
	}
	var parts []string
	for n, c := range names {
		parts = append(parts, fmt.Sprintf("%d× %s", c, n))
	}
	sort.Strings(parts)
	return okR(fmt.Sprintf("NVML loaded; %s: %s", units.Plural(len(s.Devices), "GPU"), strings.Join(parts, ", "))).
		with("devices", len(s.Devices))
}

func checkDriver(f *facts) Result {
	if r := gpuGate(f); r != nil {
		return *r
	}
	s := f.gpu
	if s.DriverVersion == "" || s.CUDADriverVersion <= 0 {
		return warnR("the driver did not report its version or its CUDA version",
			"run nvidia-smi and compare its \"CUDA Version\" with torch.version.cuda by hand")
	}
	ev := fmt.Sprintf("driver %s supports CUDA up to %s", s.DriverVersion, CUDAVersionString(s.CUDADriverVersion))
	r := okR(ev)
	if s.CUDADriverVersion < 11080 {
		r = warnR(ev+": no current PyTorch release (built for CUDA 11.8 or newer) runs on it",
			"upgrade the NVIDIA driver (>= 520 for CUDA 11.8, >= 525 for CUDA 12.x), or pin a torch built for CUDA "+CUDAVersionString(s.CUDADriverVersion)+" or older")
	}
	return r.with("driver_version", s.DriverVersion).with("cuda_max", CUDAVersionString(s.CUDADriverVersion))
}

func checkPersistence(f *facts) Result {
	if r := gpuGate(f); r != nil {
		return *r
	}
	var off, unknown []string
	for _, d := range f.gpu.Devices {
		switch {
		case d.Persistence == nil:
			unknown = append(unknown, fmt.Sprint(d.Index))
		case !*d.Persistence:
			off = append(off, fmt.Sprint(d.Index))
		}
	}
	switch {
	case len(f.gpu.Devices) == 0:
		return naR("no GPUs")
	case len(off) > 0:
		return warnR("persistence mode is off on GPU "+strings.Join(off, ", ")+": the driver tears the GPUs down when no process holds them, so every job's first CUDA call waits seconds and clocks/ECC state reset",
			"sudo nvidia-smi -pm 1, or better enable the nvidia-persistenced service")
	case len(unknown) == len(f.gpu.Devices):
		return naR("the driver does not report persistence mode (MIG, WSL or a virtual GPU)")
	}
	return okR(fmt.Sprintf("persistence mode is on for %s", allGPUs(len(f.gpu.Devices))))
}

func checkTenants(f *facts) Result {
	if r := gpuGate(f); r != nil {
		return *r
	}
	type load struct {
		pids  []string
		bytes uint64
	}
	per := map[int]*load{}
	for _, p := range f.gpu.Processes {
		l := per[p.DeviceIndex]
		if l == nil {
			l = &load{}
			per[p.DeviceIndex] = l
		}
		l.pids = append(l.pids, fmt.Sprint(p.PID))
		l.bytes += p.UsedBytes
	}
	if len(per) == 0 {
		return okR(fmt.Sprintf("no processes on %s", anyGPU(len(f.gpu.Devices))))
	}
	var full, shared []string
	for _, d := range f.gpu.Devices {
		l := per[d.Index]
		if l == nil {
			continue
		}
		desc := fmt.Sprintf("GPU %d: %s held by pid %s", d.Index, units.FormatBytes(l.bytes), strings.Join(l.pids, ","))
		if d.TotalBytes > 0 {
			desc = fmt.Sprintf("GPU %d: %s of %s held by pid %s", d.Index, units.FormatBytes(l.bytes), units.FormatBytes(d.TotalBytes), strings.Join(l.pids, ","))
		}
		if d.TotalBytes > 0 && l.bytes*10 >= d.TotalBytes*9 {
			full = append(full, desc)
		} else {
			shared = append(shared, desc)
		}
	}
	if len(full) > 0 {
		free := len(f.gpu.Devices) - len(per)
		fix := "stop them (see `vramguard top`) or wait for them"
		if free > 0 {
			fix = fmt.Sprintf("pick a free GPU with CUDA_VISIBLE_DEVICES (%d have no processes), or stop them (see `vramguard top`)", free)
		}
		return failR("already ≥90% full before your job starts: "+strings.Join(append(full, shared...), "; "), fix)
	}
	return warnR("other tenants share the GPUs: "+strings.Join(shared, "; "),
		"expect less memory than the card's total; choose GPUs with CUDA_VISIBLE_DEVICES and see `vramguard top`")
}

func checkOrphans(f *facts) Result {
	if r := gpuGate(f); r != nil {
		return *r
	}
	if f.container.OwnPIDNS {
		return naR("NVML reports host PIDs, which this container's PID namespace cannot see (see container.pidns)")
	}
	if len(f.gpu.Processes) == 0 {
		return okR("no processes hold GPU memory")
	}
	fs := procfs.FS{Root: f.env.Root}
	var gone, orphaned []string
	var goneBytes uint64
	for _, p := range f.gpu.Processes {
		pr, err := fs.Proc(p.PID)
		if err != nil {
			gone = append(gone, fmt.Sprintf("pid %d (%s on GPU %d)", p.PID, units.FormatBytes(p.UsedBytes), p.DeviceIndex))
			goneBytes += p.UsedBytes
			continue
		}
		switch {
		case pr.State == "Z":
			orphaned = append(orphaned, fmt.Sprintf("pid %d %s is a zombie holding %s on GPU %d", p.PID, pr.Comm, units.FormatBytes(p.UsedBytes), p.DeviceIndex))
		case pr.PPID == 1 && looksLikeJob(pr.Comm):
			orphaned = append(orphaned, fmt.Sprintf("pid %d %s lost its parent and holds %s on GPU %d", p.PID, pr.Comm, units.FormatBytes(p.UsedBytes), p.DeviceIndex))
		}
	}
	if len(gone) > 0 {
		return failR(fmt.Sprintf("%s of GPU memory held by processes that no longer exist: %s", units.FormatBytes(goneBytes), strings.Join(gone, ", ")),
			"the memory belongs to a dead CUDA context: find its holders with `fuser -v /dev/nvidia*` and kill them; when the GPU is otherwise idle, `nvidia-smi --gpu-reset -i N`")
	}
	if len(orphaned) > 0 {
		return warnR(strings.Join(orphaned, "; ")+": the job they belonged to is gone",
			"kill them (leftover DataLoader workers or a job killed without its children); jobs started with `vramguard run` are stopped as a whole process group")
	}
	return okR(fmt.Sprintf("all %d GPU process(es) are alive and have a parent", len(f.gpu.Processes)))
}

// looksLikeJob says whether a reparented process is plausibly a training job
// or one of its workers rather than a daemon that PID 1 adopted on purpose.
func looksLikeJob(comm string) bool {
	return strings.HasPrefix(comm, "python") || strings.HasPrefix(comm, "pt_") || comm == "torchrun"
}

// allGPUs names n GPUs as a whole: "the GPU", "both GPUs", "all 4 GPUs".
func allGPUs(n int) string {
	switch n {
	case 1:
		return "the GPU"
	case 2:
		return "both GPUs"
	}
	return fmt.Sprintf("all %d GPUs", n)
}

// anyGPU names n GPUs one by one: "the GPU", "either GPU", "any of the 4 GPUs".
func anyGPU(n int) string {
	switch n {
	case 1:
		return "the GPU"
	case 2:
		return "either GPU"
	}
	return fmt.Sprintf("any of the %d GPUs", n)
}
