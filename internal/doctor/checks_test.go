package doctor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func procStat(pid, ppid int, comm, state string) string {
	return itoa(pid) + " (" + comm + ") " + state + " " + itoa(ppid) + " " + itoa(pid) + " 4000 0 -1 4194560 100 0 0 0 50 10 0 0 20 0 1 0 90000 300000000 2000\n"
}

func itoa(n int) string {
	s := ""
	if n == 0 {
		return "0"
	}
	for ; n > 0; n /= 10 {
		s = string(rune('0'+n%10)) + s
	}
	return s
}

func gpuProcs(ps ...GPUProcess) func(*Fixture) {
	return func(fx *Fixture) { fx.GPU.Processes = ps }
}

func torchSet(f func(*Torch)) func(*Fixture) {
	return func(fx *Fixture) { f(fx.Torch) }
}

func envSet(kv ...string) func(*Fixture) {
	return func(fx *Fixture) {
		for i := 0; i+1 < len(kv); i += 2 {
			fx.Env[kv[i]] = kv[i+1]
		}
	}
}

const gib = 1 << 30

// TestChecks runs every check against fixture trees in each state it has.
// Checks without a warn or a fail state say so in docs/DOCTOR.md.
func TestChecks(t *testing.T) {
	tests := []struct {
		name string
		id   string
		sc   scenario
		want Status
		ev   string // substring of the evidence
		fix  string // substring of the fix
	}{
		// gpu.nvml
		{"nvml ok", "gpu.nvml", scenario{base: "baremetal"}, OK, "2 GPUs: 2× NVIDIA A100-SXM4-80GB", ""},
		{"nvml absent", "gpu.nvml", scenario{base: "container"}, NA, "NVML not found", ""},
		{"nvml mismatch", "gpu.nvml", scenario{base: "baremetal", fx: func(fx *Fixture) { fx.GPUError = "Driver/library version mismatch" }}, Fail, "version mismatch", "reboot"},
		{"nvml no devices", "gpu.nvml", scenario{base: "baremetal", fx: func(fx *Fixture) { fx.GPU.Devices = nil }}, Warn, "sees no GPUs", "--gpus all"},
		// gpu.driver
		{"driver ok", "gpu.driver", scenario{base: "baremetal"}, OK, "driver 550.54.15 supports CUDA up to 12.4", ""},
		{"driver old", "gpu.driver", scenario{base: "baremetal", fx: func(fx *Fixture) { fx.GPU.DriverVersion, fx.GPU.CUDADriverVersion = "470.82.01", 11040 }}, Warn, "up to 11.4", "upgrade the NVIDIA driver"},
		{"driver n/a", "gpu.driver", scenario{base: "container"}, NA, "", ""},
		// gpu.persistence
		{"persistence on", "gpu.persistence", scenario{base: "baremetal"}, OK, "on for both GPUs", ""},
		{"persistence off", "gpu.persistence", scenario{base: "baremetal", fx: func(fx *Fixture) { f := false; fx.GPU.Devices[1].Persistence = &f }}, Warn, "off on GPU 1", "nvidia-persistenced"},
		{"persistence n/a", "gpu.persistence", scenario{base: "container"}, NA, "", ""},
		// gpu.tenants
		{"tenants none", "gpu.tenants", scenario{base: "baremetal"}, OK, "no processes", ""},
		{"tenants shared", "gpu.tenants", scenario{base: "baremetal", fx: gpuProcs(GPUProcess{PID: 4242, DeviceIndex: 0, UsedBytes: 10 * gib})}, Warn, "GPU 0: 10 GiB of 80 GiB held by pid 4242", "CUDA_VISIBLE_DEVICES"},
		{"tenants full", "gpu.tenants", scenario{base: "baremetal", fx: gpuProcs(GPUProcess{PID: 4242, DeviceIndex: 0, UsedBytes: 75 * gib})}, Fail, "≥90% full", "1 have no processes"},
		{"tenants n/a", "gpu.tenants", scenario{base: "container"}, NA, "", ""},
		// gpu.orphans
		{"orphans alive", "gpu.orphans", scenario{base: "baremetal", fx: gpuProcs(GPUProcess{PID: 4242, DeviceIndex: 0, UsedBytes: gib})}, OK, "all 1 GPU process(es) are alive", ""},
		{"orphans gone pid", "gpu.orphans", scenario{base: "baremetal", fx: gpuProcs(GPUProcess{PID: 999, DeviceIndex: 1, UsedBytes: 3 * gib})}, Fail, "pid 999 (3 GiB on GPU 1)", "fuser -v /dev/nvidia*"},
		{"orphans parent gone", "gpu.orphans", scenario{base: "baremetal",
			files: map[string]string{"proc/4300/stat": procStat(4300, 1, "python", "S"), "proc/4300/cmdline": "python^@train.py"},
			fx:    gpuProcs(GPUProcess{PID: 4300, DeviceIndex: 0, UsedBytes: gib})}, Warn, "pid 4300 python lost its parent", "vramguard run"},
		{"orphans zombie", "gpu.orphans", scenario{base: "baremetal",
			files: map[string]string{"proc/4300/stat": procStat(4300, 4242, "python", "Z")},
			fx:    gpuProcs(GPUProcess{PID: 4300, DeviceIndex: 0, UsedBytes: gib})}, Warn, "zombie", ""},
		{"orphans own pidns", "gpu.orphans", scenario{base: "container", fx: func(fx *Fixture) {
			fx.GPUError = ""
			fx.GPU = &GPUSnapshot{DriverVersion: "550.54.15", CUDADriverVersion: 12040, Devices: []GPUDevice{{Index: 0, Name: "L4"}},
				Processes: []GPUProcess{{PID: 31337, UsedBytes: gib}}}
		}}, NA, "host PIDs", ""},
		// pytorch.import
		{"import ok", "pytorch.import", scenario{base: "baremetal"}, OK, "torch 2.4.1+cu121 (CUDA 12.1 build) with /home/ana/proj/.venv/bin/python", ""},
		{"import ok cpu", "pytorch.import", scenario{base: "container"}, OK, "torch 2.4.1+cpu (CPU-only build)", ""},
		{"import missing, suggest other", "pytorch.import", scenario{base: "baremetal",
			files: map[string]string{
				"usr/bin/python3": "#!fake\n",
				"usr/lib/python3/dist-packages/torch/__init__.py": "",
				"home/ana/proj/.venv/bin/python":                  "#!fake\n",
			},
			fx: torchSet(func(tr *Torch) {
				*tr = Torch{Executable: "/home/ana/proj/.venv/bin/python", ImportError: "ModuleNotFoundError: No module named 'torch'"}
			})},
			Fail, "torch not importable by /home/ana/proj/.venv/bin/python: ModuleNotFoundError", "try --python /usr/bin/python3"},
		{"import missing, nowhere", "pytorch.import", scenario{base: "baremetal",
			fx: torchSet(func(tr *Torch) {
				*tr = Torch{Executable: "/x/python", ImportError: "ModuleNotFoundError: No module named 'torch'"}
			})},
			Fail, "not importable", "install torch"},
		{"import hangs", "pytorch.import", scenario{base: "baremetal", fx: func(fx *Fixture) { fx.TorchError = "timeout" }}, Fail, "did not finish within 15s", "stuck network filesystem"},
		{"no python", "pytorch.import", scenario{base: "baremetal", opts: func(o *Options) { o.Python = "" }}, Fail, "no Python interpreter", "--python PATH"},
		// pytorch.cuda
		{"cuda ok", "pytorch.cuda", scenario{base: "baremetal"}, OK, "built for CUDA 12.1; driver 550.54.15 supports up to 12.4", ""},
		{"cuda cpu build no gpu", "pytorch.cuda", scenario{base: "container"}, OK, "CPU-only build and there is no NVIDIA driver", ""},
		{"cuda minor newer", "pytorch.cuda", scenario{base: "baremetal", fx: torchSet(func(tr *Torch) { tr.CUDA = "12.6" })}, Warn, "minor-version compatibility", "upgrade the NVIDIA driver to one that supports CUDA 12.6"},
		{"cuda driver too old", "pytorch.cuda", scenario{base: "baremetal", fx: func(fx *Fixture) { fx.GPU.DriverVersion, fx.GPU.CUDADriverVersion = "520.61.05", 11080 }}, Fail, "driver is too old", "CUDA 11.8 or older"},
		{"cuda cpu build on gpu", "pytorch.cuda", scenario{base: "baremetal", fx: torchSet(func(tr *Torch) { tr.CUDA, tr.Version = "", "2.4.1+cpu" })}, Fail, "CPU-only build on a machine with 2 NVIDIA GPUs", "download.pytorch.org"},
		{"cuda not available", "pytorch.cuda", scenario{base: "baremetal", fx: func(fx *Fixture) {
			fx.Torch.CUDAAvailable = false
			fx.Env["CUDA_VISIBLE_DEVICES"] = "-1"
		}}, Fail, "is_available() is False although the driver sees 2 GPUs (CUDA_VISIBLE_DEVICES=-1)", "CUDA_VISIBLE_DEVICES"},
		{"cuda build without driver", "pytorch.cuda", scenario{base: "container", fx: torchSet(func(tr *Torch) { tr.CUDA = "12.1" })}, Warn, "no NVIDIA driver here", "--gpus all"},
		{"cuda n/a", "pytorch.cuda", scenario{base: "baremetal", fx: func(fx *Fixture) { fx.Torch.Importable = false }}, NA, "", ""},
		// pytorch.cudnn
		{"cudnn ok", "pytorch.cudnn", scenario{base: "baremetal"}, OK, "cuDNN 9.1.0", ""},
		{"cudnn 8", "pytorch.cudnn", scenario{base: "baremetal", fx: torchSet(func(tr *Torch) { tr.CUDNN = 8902 })}, OK, "cuDNN 8.9.2", ""},
		{"cudnn missing", "pytorch.cudnn", scenario{base: "baremetal", fx: torchSet(func(tr *Torch) { tr.CUDNN, tr.CUDNNError = 0, "libcudnn.so.9: cannot open shared object file" })}, Warn, "cuDNN is not loadable: libcudnn.so.9", "nvidia-cudnn-cu12"},
		{"cudnn cpu", "pytorch.cudnn", scenario{base: "container"}, NA, "CPU-only", ""},
		// pytorch.cudart
		{"cudart one", "pytorch.cudart", scenario{base: "baremetal"}, OK, "one CUDA runtime", ""},
		{"cudart several", "pytorch.cudart", scenario{base: "baremetal", fx: torchSet(func(tr *Torch) {
			tr.CudartFiles = append(tr.CudartFiles, "/usr/local/cuda-12.4/lib64/libcudart.so.12.4.127")
		})}, Warn, "2 CUDA runtime libraries", "LD_LIBRARY_PATH"},
		{"cudart older loaded", "pytorch.cudart", scenario{base: "baremetal", fx: torchSet(func(tr *Torch) {
			tr.CudartFiles = append(tr.CudartFiles, "/usr/local/cuda-12.0/lib64/libcudart.so.12.0.146")
			tr.CudartLoaded = []string{"/usr/local/cuda-12.0/lib64/libcudart.so.12.0.146"}
		})}, Fail, "loaded the older runtime /usr/local/cuda-12.0/lib64/libcudart.so.12.0.146", "remove /usr/local/cuda-12.0/lib64 from LD_LIBRARY_PATH"},
		// pytorch.alloc_conf
		{"alloc unset", "pytorch.alloc_conf", scenario{base: "baremetal"}, OK, "not set", ""},
		{"alloc sane", "pytorch.alloc_conf", scenario{base: "baremetal", fx: envSet("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")}, OK, "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", ""},
		{"alloc gc without fraction", "pytorch.alloc_conf", scenario{base: "baremetal", fx: envSet("PYTORCH_CUDA_ALLOC_CONF", "garbage_collection_threshold:0.6,max_split_size_mb:128")}, Warn, "garbage_collection_threshold does nothing", "set_per_process_memory_fraction"},
		{"alloc expandable with split", "pytorch.alloc_conf", scenario{base: "baremetal", fx: envSet("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True,max_split_size_mb:512")}, Warn, "max_split_size_mb has no effect", "drop max_split_size_mb"},
		{"alloc unknown key", "pytorch.alloc_conf", scenario{base: "baremetal", fx: envSet("PYTORCH_CUDA_ALLOC_CONF", "expandable_segment:True")}, Fail, "unknown option \"expandable_segment\"", "first CUDA allocation"},
		{"alloc bad value", "pytorch.alloc_conf", scenario{base: "baremetal", fx: envSet("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:16")}, Fail, "must be more than 20", ""},
		{"alloc new name on old torch", "pytorch.alloc_conf", scenario{base: "baremetal", fx: envSet("PYTORCH_ALLOC_CONF", "expandable_segments:True")}, Warn, "torch 2.4.1+cu121 reads only PYTORCH_CUDA_ALLOC_CONF", "rename it"},
		// pytorch.fork
		{"fork clean", "pytorch.fork", scenario{base: "baremetal"}, OK, "none of the 4 running processes", ""},
		{"fork after cuda", "pytorch.fork", scenario{base: "baremetal", files: map[string]string{
			"proc/4242/maps": "7f1000000000-7f1000100000 r-xp 00000000 103:02 99 /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15\n",
			"proc/4250/maps": "7f1000000000-7f1000100000 r-xp 00000000 103:02 99 /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15\n",
		}}, Warn, "pid 4242 (python train.py --epochs 10) initialised CUDA and forked 1 worker (pid [4250])", "multiprocessing_context=\"spawn\""},
		{"fork before cuda", "pytorch.fork", scenario{base: "baremetal", files: map[string]string{
			"proc/4242/maps": "7f1000000000-7f1000100000 r-xp 00000000 103:02 99 /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15\n",
		}}, OK, "none of the 4", ""},
		// container.detect
		{"container none", "container.detect", scenario{base: "baremetal"}, OK, "not inside a container", ""},
		{"container docker", "container.detect", scenario{base: "container"}, OK, "docker: /.dockerenv exists", ""},
		{"container k8s", "container.detect", scenario{base: "baremetal", files: map[string]string{"proc/1/cgroup": "0::/kubepods/burstable/pod1234/abcd\n"}}, OK, "kubernetes: /proc/1/cgroup mentions kubepods", ""},
		// container.shm
		{"shm ok", "container.shm", scenario{base: "baremetal"}, OK, "/dev/shm is 32 GiB", ""},
		{"shm docker default", "container.shm", scenario{base: "container"}, Fail, "/dev/shm is 64 MiB (Docker's default)", "--shm-size"},
		{"shm small", "container.shm", scenario{base: "container", fx: func(fx *Fixture) { fx.Statfs["/dev/shm"] = FSInfo{Type: "tmpfs", TotalBytes: 512 << 20} }}, Warn, "512 MiB", "--shm-size"},
		{"shm from mount options", "container.shm", scenario{base: "container", fx: func(fx *Fixture) { delete(fx.Statfs, "/dev/shm"); fx.Statfs["/"] = FSInfo{} }}, Fail, "64 MiB", ""},
		{"shm missing", "container.shm", scenario{base: "container", files: map[string]string{"dev/shm": del, "proc/self/mountinfo": "600 500 0:50 / / rw - overlay overlay rw\n"},
			fx: func(fx *Fixture) { fx.Statfs = map[string]FSInfo{} }}, Fail, "does not exist", ""},
		// container.memory
		{"memory unlimited", "container.memory", scenario{base: "baremetal"}, OK, "no cgroup memory limit; the host has 504 GiB", ""},
		{"memory 2g", "container.memory", scenario{base: "container"}, Warn, "cgroup memory limit 2 GiB (/sys/fs/cgroup/memory.max) on a host with 64 GiB", "--memory"},
		{"memory tiny", "container.memory", scenario{base: "container", files: map[string]string{"sys/fs/cgroup/memory.max": "536870912\n"}}, Fail, "512 MiB", "--memory"},
		{"memory v2 ancestor", "container.memory", scenario{base: "baremetal", files: map[string]string{"sys/fs/cgroup/user.slice/memory.max": "17179869184\n"}}, Warn, "16 GiB (/sys/fs/cgroup/user.slice/memory.max)", ""},
		{"memory v1", "container.memory", scenario{base: "baremetal", files: map[string]string{
			"proc/self/cgroup":                                      "4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n0::/\n",
			"sys/fs/cgroup/cgroup.controllers":                      del,
			"sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes": "4294967296\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes":            "9223372036854771712\n",
		}}, Warn, "4 GiB (/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes)", ""},
		// container.cpu
		{"cpu unlimited", "container.cpu", scenario{base: "baremetal"}, OK, "no CPU limit; 64 CPUs", ""},
		{"cpu quota", "container.cpu", scenario{base: "container", files: map[string]string{"sys/fs/cgroup/cpu.max": "200000 100000\n"}}, Warn, "CPU quota 2 CPUs (/sys/fs/cgroup/cpu.max) on a host with 16 CPUs", "num_workers<=2"},
		{"cpu half", "container.cpu", scenario{base: "container", files: map[string]string{"sys/fs/cgroup/cpu.max": "50000 100000\n"}}, Fail, "0.50 CPUs", "--cpus"},
		{"cpu v1 quota", "container.cpu", scenario{base: "baremetal", files: map[string]string{
			"proc/self/cgroup":                                       "3:cpu,cpuacct:/docker/abc\n0::/\n",
			"sys/fs/cgroup/cgroup.controllers":                       del,
			"sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us":  "400000\n",
			"sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000\n",
		}}, Warn, "CPU quota 4 CPUs", ""},
		{"cpu cpuset", "container.cpu", scenario{base: "baremetal", files: map[string]string{"proc/self/status": "Cpus_allowed_list:\t0-7\n"}}, Warn, "cpuset 0-7 (8 CPUs) on a host with 64 CPUs", ""},
		// container.pidns
		{"pidns host", "container.pidns", scenario{base: "baremetal"}, OK, "not in a container", ""},
		{"pidns shared with host", "container.pidns", scenario{base: "baremetal", files: map[string]string{".dockerenv": ""}}, OK, "shares the host's PID namespace", ""},
		{"pidns own with gpus", "container.pidns", scenario{base: "container", fx: func(fx *Fixture) {
			fx.GPUError = ""
			fx.GPU = &GPUSnapshot{DriverVersion: "550.54.15", CUDADriverVersion: 12040, Devices: []GPUDevice{{Index: 0, Name: "L4"}}}
		}}, Warn, "own PID namespace (PID 1 is python)", "--pid=host"},
		{"pidns no gpus", "container.pidns", scenario{base: "container"}, NA, "no GPUs", ""},
		// storage.ephemeral
		{"ephemeral disk", "storage.ephemeral", scenario{base: "baremetal"}, OK, "/data/ckpt is on xfs (/dev/md0 mounted at /data)", ""},
		{"ephemeral overlay", "storage.ephemeral", scenario{base: "container"}, Warn, "/workspace/ckpt is on the container's writable layer (overlay)", "docker run -v /data/ckpt:/workspace/ckpt"},
		{"ephemeral tmpfs", "storage.ephemeral", scenario{base: "baremetal", opts: func(o *Options) { o.Dir = "/dev/shm" }}, Fail, "on tmpfs", "mounted volume"},
		{"ephemeral symlink to disk", "storage.ephemeral", scenario{base: "container", files: map[string]string{
			"proc/self/mountinfo": "600 500 0:50 / / rw - overlay overlay rw\n700 600 259:3 /vol /mnt/vol rw - ext4 /dev/nvme1n1 rw\n",
			"mnt/vol/ckpt/.keep":  "",
		}, opts: func(o *Options) { o.Dir = "/mnt/vol/ckpt" }}, OK, "on ext4", ""},
		{"ephemeral no dir", "storage.ephemeral", scenario{base: "baremetal", opts: func(o *Options) { o.Dir = "" }}, NA, "no --dir", "--dir"},
		// storage.space
		{"space ok", "storage.space", scenario{base: "baremetal"}, OK, "the newest checkpoint step-1000.pt is 41 B, keeping 3 needs 123 B", ""},
		{"space tight", "storage.space", scenario{base: "baremetal", fx: func(fx *Fixture) { fx.Statfs["/data"] = FSInfo{Type: "xfs", FreeBytes: 100} }}, Warn, "100 B free", "keep fewer"},
		{"space full", "storage.space", scenario{base: "baremetal", fx: func(fx *Fixture) { fx.Statfs["/data"] = FSInfo{Type: "xfs", FreeBytes: 10} }}, Fail, "does not fit", ""},
		{"space sharded dir newest", "storage.space", scenario{base: "baremetal", files: map[string]string{
			"data/ckpt/checkpoint-2000/model-00001.safetensors": strings.Repeat("x", 1000),
			"data/ckpt/checkpoint-2000/config.json":             "{}",
		}, fx: func(fx *Fixture) { fx.Statfs["/data"] = FSInfo{Type: "xfs", FreeBytes: 2500} }}, Warn, "checkpoint-2000/ is 1002 B", ""},
		{"space no checkpoints", "storage.space", scenario{base: "container"}, OK, "no checkpoints there yet", ""},
		// storage.writable
		{"writable ok", "storage.writable", scenario{base: "baremetal"}, OK, "renames atomically", ""},
		{"writable read-only", "storage.writable", scenario{base: "baremetal", fx: func(fx *Fixture) { fx.WriteError = "read-only file system" }}, Fail, "read-only file system", "read-write"},
		{"writable copy rename", "storage.writable", scenario{base: "baremetal", fx: func(fx *Fixture) { fx.RenameCopies = true }}, Warn, "rename is not atomic there", "local disk"},
		{"writable no dir", "storage.writable", scenario{base: "baremetal", opts: func(o *Options) { o.Dir = "" }}, NA, "", ""},
		// repro.lock
		{"lock uv", "repro.lock", scenario{base: "baremetal"}, OK, "/home/ana/proj/uv.lock", ""},
		{"lock in parent", "repro.lock", scenario{base: "baremetal", fx: func(fx *Fixture) { fx.Cwd = "/home/ana/proj/src/model" }, files: map[string]string{"home/ana/proj/src/model/x.py": ""}}, OK, "/home/ana/proj/uv.lock", ""},
		{"lock none", "repro.lock", scenario{base: "baremetal", files: map[string]string{"home/ana/proj/uv.lock": del}}, Warn, "no environment lock in /home/ana/proj", "uv lock"},
		{"requirements pinned", "repro.lock", scenario{base: "baremetal", files: map[string]string{
			"home/ana/proj/uv.lock":          del,
			"home/ana/proj/requirements.txt": "# pinned\n--index-url https://download.pytorch.org/whl/cu121\ntorch==2.4.1\nnumpy==1.26.4 ; python_version >= \"3.10\"\n",
		}}, OK, "pin all 2 requirements", ""},
		{"requirements loose", "repro.lock", scenario{base: "baremetal", files: map[string]string{
			"home/ana/proj/uv.lock":          del,
			"home/ana/proj/requirements.txt": "torch>=2.0\nnumpy\ntransformers==4.44.0\n",
		}}, Warn, "pin 1 of 3 requirements; not pinned: torch (requirements.txt), numpy (requirements.txt)", "pip freeze"},
		{"environment.yml", "repro.lock", scenario{base: "baremetal", files: map[string]string{"home/ana/proj/uv.lock": del, "home/ana/proj/environment.yml": "name: x\n"}}, OK, "environment.yml", ""},
		// host.overcommit
		{"overcommit heuristic", "host.overcommit", scenario{base: "baremetal"}, OK, "=0 (heuristic)", ""},
		{"overcommit strict small", "host.overcommit", scenario{base: "baremetal", files: map[string]string{"proc/sys/vm/overcommit_memory": "2\n"}}, Fail, "CommitLimit 252 GiB of 504 GiB RAM", "overcommit_memory=0"},
		{"overcommit strict large", "host.overcommit", scenario{base: "baremetal", files: map[string]string{"proc/sys/vm/overcommit_memory": "2\n", "proc/sys/vm/overcommit_ratio": "100\n",
			"proc/meminfo": "MemTotal: 1000 kB\nCommitLimit: 1000 kB\n"}}, Warn, "strict", ""},
		// host.swap
		{"swap none", "host.swap", scenario{base: "baremetal"}, OK, "no swap", ""},
		{"swap used", "host.swap", scenario{base: "baremetal", files: map[string]string{"proc/meminfo": "MemTotal: 1000000 kB\nMemAvailable: 300000 kB\nSwapTotal: 1000000 kB\nSwapFree: 300000 kB\n"}}, Warn, "swap 684 MiB of 977 MiB used", "num_workers"},
		{"swap exhausted", "host.swap", scenario{base: "baremetal", files: map[string]string{"proc/meminfo": "MemTotal: 1000000 kB\nMemAvailable: 20000 kB\nSwapTotal: 1000000 kB\nSwapFree: 50000 kB\n"}}, Fail, "out of memory now", ""},
		{"swap light", "host.swap", scenario{base: "baremetal", files: map[string]string{"proc/meminfo": "MemTotal: 1000000 kB\nMemAvailable: 800000 kB\nSwapTotal: 1000000 kB\nSwapFree: 900000 kB\n"}}, OK, "97.7 MiB of 977 MiB used", ""},
		// host.nofile
		{"nofile high", "host.nofile", scenario{base: "baremetal"}, OK, "soft 1048576", ""},
		{"nofile default", "host.nofile", scenario{base: "baremetal", files: map[string]string{"proc/self/limits": "Max open files            1024                 4096                 files\n"}}, Warn, "soft 1024, hard 4096", "--ulimit nofile"},
		{"nofile tiny", "host.nofile", scenario{base: "baremetal", files: map[string]string{"proc/self/limits": "Max open files            256                  1048576              files\n"}}, Fail, "received 0 items of ancdata", "ulimit -n 65536 before"},
		// host.memlock
		{"memlock unlimited", "host.memlock", scenario{base: "baremetal"}, OK, "soft unlimited", ""},
		{"memlock limited no ib", "host.memlock", scenario{base: "container"}, OK, "8 MiB; no InfiniBand", ""},
		{"memlock limited with ib", "host.memlock", scenario{base: "container", files: map[string]string{"sys/class/infiniband/mlx5_0/node_type": "1: CA\n"}}, Fail, "1 InfiniBand/RDMA device:", "memlock=-1"},
		// host.numa
		{"numa placed", "host.numa", scenario{base: "baremetal"}, OK, "2 NUMA nodes; 2 GPUs placed", ""},
		{"numa single", "host.numa", scenario{base: "container"}, OK, "1 NUMA node", ""},
		{"numa wrong node", "host.numa", scenario{base: "baremetal", files: map[string]string{"proc/self/status": "Cpus_allowed_list:\t32-63\n"}}, Warn, "GPU 0 is on NUMA node 0 but this process may only run on CPUs 32-63", "numactl"},
		{"numa balancing", "host.numa", scenario{base: "baremetal", files: map[string]string{"proc/sys/kernel/numa_balancing": "1\n"}}, Warn, "numa_balancing=1", "numa_balancing=0"},
		// n/a where the input cannot be read
		{"cudart n/a", "pytorch.cudart", scenario{base: "baremetal", fx: func(fx *Fixture) { fx.Torch.Importable = false }}, NA, "", ""},
		{"fork n/a", "pytorch.fork", scenario{base: "baremetal", files: map[string]string{"proc": del}}, NA, "cannot list processes", ""},
		{"space no dir", "storage.space", scenario{base: "baremetal", opts: func(o *Options) { o.Dir = "" }}, NA, "no --dir", "--dir"},
		{"overcommit n/a", "host.overcommit", scenario{base: "baremetal", files: map[string]string{"proc/sys/vm/overcommit_memory": del}}, NA, "", ""},
		{"swap n/a", "host.swap", scenario{base: "baremetal", files: map[string]string{"proc/meminfo": del}}, NA, "", ""},
		{"nofile n/a", "host.nofile", scenario{base: "baremetal", files: map[string]string{"proc/self/limits": del}}, NA, "", ""},
		{"memlock n/a", "host.memlock", scenario{base: "baremetal", files: map[string]string{"proc/self/limits": del}}, NA, "", ""},
	}
	covered := map[string]map[Status]bool{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := tt.sc.run(t)
			r, ok := rep.Get(tt.id)
			if !ok {
				t.Fatalf("no check %s", tt.id)
			}
			if r.Status != tt.want || !strings.Contains(r.Evidence, tt.ev) || !strings.Contains(r.Fix, tt.fix) {
				t.Errorf("%s = %s\n  evidence: %s\n  fix: %s\nwant %s, evidence containing %q, fix containing %q",
					tt.id, r.Status, r.Evidence, r.Fix, tt.want, tt.ev, tt.fix)
			}
			if (r.Status == Warn || r.Status == Fail) && r.Fix == "" {
				t.Errorf("%s is %s without a fix", tt.id, r.Status)
			}
		})
		if covered[tt.id] == nil {
			covered[tt.id] = map[Status]bool{}
		}
		covered[tt.id][tt.want] = true
	}
	// Every check is exercised in every state it can reach (see
	// docs/DOCTOR.md for the states each one has).
	for _, id := range CheckIDs() {
		for _, st := range statesOf[id] {
			if !covered[id][st] {
				t.Errorf("%s: no test for state %s", id, st)
			}
		}
	}
}

// statesOf lists the states each check can report; docs/DOCTOR.md carries
// the same table.
var statesOf = map[string][]Status{
	"gpu.nvml":           {OK, Warn, Fail, NA},
	"gpu.driver":         {OK, Warn, NA},
	"gpu.persistence":    {OK, Warn, NA},
	"gpu.tenants":        {OK, Warn, Fail, NA},
	"gpu.orphans":        {OK, Warn, Fail, NA},
	"pytorch.import":     {OK, Fail},
	"pytorch.cuda":       {OK, Warn, Fail, NA},
	"pytorch.cudnn":      {OK, Warn, NA},
	"pytorch.cudart":     {OK, Warn, Fail, NA},
	"pytorch.alloc_conf": {OK, Warn, Fail},
	"pytorch.fork":       {OK, Warn, NA},
	"container.detect":   {OK},
	"container.shm":      {OK, Warn, Fail},
	"container.memory":   {OK, Warn, Fail},
	"container.cpu":      {OK, Warn, Fail},
	"container.pidns":    {OK, Warn, NA},
	"storage.ephemeral":  {OK, Warn, Fail, NA},
	"storage.space":      {OK, Warn, Fail, NA},
	"storage.writable":   {OK, Warn, Fail, NA},
	"repro.lock":         {OK, Warn},
	"host.overcommit":    {OK, Warn, Fail, NA},
	"host.swap":          {OK, Warn, Fail, NA},
	"host.nofile":        {OK, Warn, Fail, NA},
	"host.memlock":       {OK, Fail, NA},
	"host.numa":          {OK, Warn},
}

func TestStatesOfCoversEveryCheck(t *testing.T) {
	for _, id := range CheckIDs() {
		if len(statesOf[id]) == 0 {
			t.Errorf("%s has no states listed", id)
		}
	}
	if len(statesOf) != len(CheckIDs()) {
		t.Errorf("statesOf lists %d checks, there are %d", len(statesOf), len(CheckIDs()))
	}
}

// TestDocsListStates keeps docs/DOCTOR.md's table of states in step with
// statesOf (and so with the tests above).
func TestDocsListStates(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "DOCTOR.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(line, "|")
		if len(f) < 4 || !strings.HasPrefix(strings.TrimSpace(f[1]), "`") {
			continue
		}
		id := strings.Trim(strings.TrimSpace(f[1]), "`")
		if _, isCheck := statesOf[id]; isCheck {
			documented[id] = strings.TrimSpace(f[2])
		}
	}
	for _, id := range CheckIDs() {
		var want []string
		for _, s := range statesOf[id] {
			want = append(want, string(s))
		}
		if got := documented[id]; got != strings.Join(want, ", ") {
			t.Errorf("docs/DOCTOR.md lists %s as %q, the tests cover %q", id, got, strings.Join(want, ", "))
		}
	}
}
