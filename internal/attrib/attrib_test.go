package attrib

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/vramguard/vramguard/internal/gpu"
	"github.com/vramguard/vramguard/internal/procfs"
	"github.com/vramguard/vramguard/internal/testbin"
)

var update = flag.Bool("update", false, "rewrite golden files")

// A fixture (testdata/*.tree) describes a /proc tree compactly; buildTree
// writes it out as the real files the kernel would show (stat, status,
// cgroup, cmdline), so the tests read it through procfs like a live system.
//
//	proc PID PPID PGID COMM RSS_KiB [nspid=H,C,...] [uid=N]
//	cmd PID ARG...
//	cgroup PID            followed by the file's lines, then "end"
//	gpu PID DEVICE MiB    a driver record
//	run PID RUNID NAME    a supervised run's root (OwnerHints)
//	notebook KERNELID PATH   the notebook a kernel serves (NotebookHints)
//	conn FILE KERNELID       the kernel a connection file belongs to (KernelHints)
//	owner KERNELID UID       whose kernel it is (KernelOwners)
//	podlog DIR [CONTAINER]   a kubelet pod log directory, var/log/pods/DIR
//	                         (with CONTAINER/0.log in it when given)
//	passwd NAME:x:UID:...    a line of the tree's etc/passwd (the owners'
//	                         names; a UID it does not name shows as a number)
type fixture struct {
	root  string
	gpu   []gpu.Process
	hints hints
}

type hints struct {
	runs      map[int][2]string
	notebooks map[string]string
	conns     map[string]string
	owners    map[string]int
}

func (h hints) KernelOwner(id string) (int, bool) {
	uid, ok := h.owners[id]
	return uid, ok
}

func (h hints) KernelForConnection(_ int, file string) (string, bool) {
	id, ok := h.conns[file]
	return id, ok
}

func (h hints) NotebookForKernel(id string) (string, bool) {
	nb, ok := h.notebooks[id]
	return nb, ok
}

func (h hints) RunForPID(pid int) (string, string, bool) {
	r, ok := h.runs[pid]
	return r[0], r[1], ok
}

func buildTree(t *testing.T, spec string) fixture {
	t.Helper()
	f, err := os.Open(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fx := fixture{root: t.TempDir(), hints: hints{runs: map[int][2]string{}, notebooks: map[string]string{}, conns: map[string]string{}, owners: map[string]int{}}}
	write := func(pid int, name, content string) {
		dir := filepath.Join(fx.root, "proc", strconv.Itoa(pid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	atoi := func(s string) int {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("%s: %q is not a number", spec, s)
		}
		return n
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		w := strings.Fields(line)
		switch w[0] {
		case "proc":
			pid, ppid, pgid, comm, rss := atoi(w[1]), atoi(w[2]), atoi(w[3]), w[4], atoi(w[5])
			nspid, uid := strconv.Itoa(pid), "1000"
			for _, o := range w[6:] {
				k, v, _ := strings.Cut(o, "=")
				switch k {
				case "nspid":
					nspid = strings.ReplaceAll(v, ",", "\t")
				case "uid":
					uid = v
				}
			}
			pages := uint64(rss) * 1024 / procfs.PageSize
			write(pid, "stat", fmt.Sprintf("%d (%s) S %d %d %d 0 -1 4194560 100 0 0 0 250 30 0 0 20 0 4 0 %d 1000000 %d 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0\n",
				pid, comm, ppid, pgid, pgid, 1000+pid, pages))
			write(pid, "status", fmt.Sprintf("Name:\t%s\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t%d\nNgid:\t0\nPid:\t%d\nPPid:\t%d\nUid:\t%s\t%s\t%s\t%s\nNSpid:\t%s\nVmRSS:\t%d kB\n",
				comm, pid, pid, ppid, uid, uid, uid, uid, nspid, rss))
			write(pid, "cmdline", comm+"\x00")
			write(pid, "cgroup", "0::/user.slice/user-1000.slice/session-3.scope\n")
		case "cmd":
			write(atoi(w[1]), "cmdline", strings.Join(w[2:], "\x00")+"\x00")
		case "cgroup":
			pid := atoi(w[1])
			var b strings.Builder
			for sc.Scan() && strings.TrimSpace(sc.Text()) != "end" {
				b.WriteString(strings.TrimSpace(sc.Text()) + "\n")
			}
			write(pid, "cgroup", b.String())
		case "gpu":
			fx.gpu = append(fx.gpu, gpu.Process{PID: atoi(w[1]), DeviceIndex: atoi(w[2]),
				DeviceUUID: "GPU-" + w[2], UsedBytes: uint64(atoi(w[3])) << 20, SMUtilPercent: -1})
		case "run":
			fx.hints.runs[atoi(w[1])] = [2]string{w[2], strings.Join(w[3:], " ")}
		case "notebook":
			fx.hints.notebooks[w[1]] = w[2]
		case "conn":
			fx.hints.conns[w[1]] = w[2]
		case "owner":
			fx.hints.owners[w[1]] = atoi(w[2])
		case "passwd":
			dir := filepath.Join(fx.root, "etc")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			pf, err := os.OpenFile(filepath.Join(dir, "passwd"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			_, err = pf.WriteString(w[1] + "\n")
			pf.Close()
			if err != nil {
				t.Fatal(err)
			}
		case "podlog":
			dir := filepath.Join(PodLogDir(fx.root), w[1])
			if len(w) > 2 {
				dir = filepath.Join(dir, w[2])
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if len(w) > 2 {
				if err := os.WriteFile(filepath.Join(dir, "0.log"), []byte("2025-06-01T12:00:00Z stdout F ready\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		default:
			t.Fatalf("%s: unknown line %q", spec, line)
		}
	}
	return fx
}

func TestGolden(t *testing.T) {
	specs, _ := filepath.Glob("testdata/*.tree")
	if len(specs) < 8 {
		t.Fatalf("only %d fixture trees", len(specs))
	}
	for _, spec := range specs {
		name := strings.TrimSuffix(filepath.Base(spec), ".tree")
		t.Run(name, func(t *testing.T) {
			fx := buildTree(t, spec)
			a := Attributor{Src: procfs.FS{Root: fx.root}, Hints: fx.hints, Pods: NewPodIndex(PodLogDir(fx.root))}
			res, err := a.Attribute(fx.gpu)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := json.MarshalIndent(res, "", "  ")
			got = append(got, '\n')
			// A second pass answers from what the first one kept (command
			// lines, cgroups, status); it must come to the same result.
			res2, err := a.Attribute(fx.gpu)
			if err != nil {
				t.Fatal(err)
			}
			if again, _ := json.MarshalIndent(res2, "", "  "); string(append(again, '\n')) != string(got) {
				t.Errorf("second pass differs from the first:\n%s", again)
			}
			testbin.Golden(t, filepath.Join("testdata", name+".golden.json"), got, *update)
		})
	}
}

func TestNilHints(t *testing.T) {
	fx := buildTree(t, "testdata/docker-v2.tree")
	a := Attributor{Src: procfs.FS{Root: fx.root}}
	if _, err := a.Attribute(fx.gpu); err != nil {
		t.Fatal(err)
	}
}

func TestKernelID(t *testing.T) {
	tests := []struct {
		argv     []string
		id, file string
		ok       bool
	}{
		{[]string{"/usr/bin/python3", "-m", "ipykernel_launcher", "-f", "/run/user/1000/jupyter/runtime/kernel-3f1c.json"}, "3f1c", "/run/user/1000/jupyter/runtime/kernel-3f1c.json", true},
		{[]string{"python", "-m", "ipykernel_launcher", "--f=/home/a/.local/share/jupyter/runtime/kernel-v2-99.json"}, "v2-99", "/home/a/.local/share/jupyter/runtime/kernel-v2-99.json", true},
		{[]string{"python", "-m", "ipykernel", "-f=/tmp/kernel-x.json"}, "x", "/tmp/kernel-x.json", true},
		// a client's own names (nbclient's, a KernelManager's): a kernel whose id the file's contents give
		{[]string{"python", "-m", "ipykernel_launcher", "-f", "/tmp/tmpa1b2c3d4.json"}, "", "/tmp/tmpa1b2c3d4.json", true},
		{[]string{"vramguard", "run", "--kernel", "--", "python", "-m", "ipykernel_launcher", "-f", "/tmp/tmpq.json"}, "", "/tmp/tmpq.json", true},
		{[]string{"python", "train.py", "-f", "/tmp/kernel-x.json"}, "", "", false},
		{[]string{"python", "-m", "ipykernel_launcher", "-f", "/etc/kernel.cfg"}, "", "", false},
		{[]string{"python", "-m", "ipykernel_launcher"}, "", "", false},
		{nil, "", "", false},
	}
	for _, tt := range tests {
		id, file, ok := KernelID(tt.argv)
		if id != tt.id || file != tt.file || ok != tt.ok {
			t.Errorf("KernelID(%q) = %q, %q, %v; want %q, %q, %v", tt.argv, id, file, ok, tt.id, tt.file, tt.ok)
		}
	}
}

func TestConnectionFile(t *testing.T) {
	tests := []struct {
		argv []string
		file string
		id   string // the server's kernel id; "" for none
	}{
		{[]string{"python3", "-m", "ipykernel_launcher", "-f", "/run/user/1000/jupyter/kernel-3f2a.json"}, "/run/user/1000/jupyter/kernel-3f2a.json", "3f2a"},
		{[]string{"python", "-m", "ipykernel", "--f=/tmp/kernel-abc-def.json"}, "/tmp/kernel-abc-def.json", "abc-def"},
		{[]string{"python", "-m", "ipykernel", "-f=/tmp/kernel-x.json"}, "/tmp/kernel-x.json", "x"},
		{[]string{"ir", "--connection-file", "/r/kernel-r1.json"}, "/r/kernel-r1.json", "r1"},
		{[]string{"vramguard", "run", "--kernel", "--", "python", "-m", "ipykernel_launcher", "-f", "/r/kernel-9.json"}, "/r/kernel-9.json", "9"},
		// a client's own names: nbclient's and KernelManager's mkstemp, VS Code's
		{[]string{"python", "-m", "ipykernel_launcher", "-f", "/tmp/tmpa1b2c3d4.json"}, "/tmp/tmpa1b2c3d4.json", ""},
		{[]string{"python", "-m", "ipykernel_launcher", "--f=/home/a/.local/share/jupyter/runtime/kernel-v2-4242xyz.json"}, "/home/a/.local/share/jupyter/runtime/kernel-v2-4242xyz.json", "v2-4242xyz"},
		{[]string{"python", "-m", "ipykernel", "-f", "/tmp/kernel-.json"}, "/tmp/kernel-.json", ""},
		{[]string{"python", "train.py", "-f"}, "", ""},
		{[]string{"python", "train.py", "--f="}, "", ""},
		{nil, "", ""},
	}
	for _, tt := range tests {
		file, ok := ConnectionFile(tt.argv)
		if file != tt.file || ok != (tt.file != "") {
			t.Errorf("ConnectionFile(%q) = %q, %v; want %q", tt.argv, file, ok, tt.file)
		}
		id, ok := ServerKernelID(file)
		if id != tt.id || ok != (tt.id != "") {
			t.Errorf("ServerKernelID(%q) = %q, %v; want %q", file, id, ok, tt.id)
		}
	}
}

func TestParseCgroup(t *testing.T) {
	const id = "4c5b1d0e8a7f6e5d4c3b2a1908f7e6d5c4b3a29180f7e6d5c4b3a2918f7e6d5c"
	const static = "5e2b7c0d9f3a41e6b8c4d2a0f1e3b5c7"
	tests := []struct {
		name, file string
		want       Context
	}{
		{"docker systemd v2", "0::/system.slice/docker-" + id + ".scope\n",
			Context{Runtime: "docker", ContainerID: id, CgroupVersion: 2}},
		{"docker cgroupfs v1", "12:memory:/docker/" + id + "\n11:pids:/docker/" + id + "\n1:name=systemd:/docker/" + id + "\n",
			Context{Runtime: "docker", ContainerID: id, CgroupVersion: 1}},
		{"k8s containerd systemd", "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0a1b2c3d_4e5f_6789_abcd_ef0123456789.slice/cri-containerd-" + id + ".scope\n",
			Context{Runtime: "containerd", ContainerID: id, PodUID: "0a1b2c3d-4e5f-6789-abcd-ef0123456789", QoS: "burstable", CgroupVersion: 2}},
		{"k8s containerd cgroupfs v1", "9:memory:/kubepods/besteffort/pod0a1b2c3d-4e5f-6789-abcd-ef0123456789/" + id + "\n",
			Context{Runtime: "containerd", ContainerID: id, PodUID: "0a1b2c3d-4e5f-6789-abcd-ef0123456789", QoS: "besteffort", CgroupVersion: 1}},
		{"k8s guaranteed", "0::/kubepods/pod0a1b2c3d-4e5f-6789-abcd-ef0123456789/" + id + "\n",
			Context{Runtime: "containerd", ContainerID: id, PodUID: "0a1b2c3d-4e5f-6789-abcd-ef0123456789", QoS: "guaranteed", CgroupVersion: 2}},
		{"cri-o", "0::/kubepods.slice/kubepods-pod0a1b2c3d_4e5f_6789_abcd_ef0123456789.slice/crio-" + id + ".scope\n",
			Context{Runtime: "cri-o", ContainerID: id, PodUID: "0a1b2c3d-4e5f-6789-abcd-ef0123456789", QoS: "guaranteed", CgroupVersion: 2}},
		{"podman rootless", "0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-" + id + ".scope/container\n",
			Context{Runtime: "podman", ContainerID: id, CgroupVersion: 2}},
		{"podman cgroupfs", "0::/libpod_parent/libpod-" + id + "\n",
			Context{Runtime: "podman", ContainerID: id, CgroupVersion: 2}},
		{"conmon is not the container", "0::/machine.slice/libpod-conmon-" + id + ".scope\n",
			Context{Unit: "libpod-conmon-" + id + ".scope", CgroupVersion: 2}},
		{"slurm v1", "7:memory:/slurm/uid_1000/job_4242/step_0/task_0\n3:cpuset:/slurm/uid_1000/job_4242/step_0\n",
			Context{SlurmJob: "4242", SlurmStep: "0", CgroupVersion: 1}},
		{"slurm v2", "0::/system.slice/slurmstepd.scope/job_77/step_batch/user/task_0\n",
			Context{SlurmJob: "77", SlurmStep: "batch", Unit: "slurmstepd.scope", CgroupVersion: 2}},
		{"slurm 26.05 SLUID v2", "0::/system.slice/slurmstepd.scope/s0A1B2C3D4E5F6/step_0/user/task_1\n",
			Context{SlurmJob: "s0A1B2C3D4E5F6", SlurmSLUID: "s0A1B2C3D4E5F6", SlurmStep: "0", Unit: "slurmstepd.scope", CgroupVersion: 2}},
		{"slurm 26.05 SLUID and job id", "0::/system.slice/slurmstepd.scope/job_4243/s0A1B2C3D4E5F7/step_batch/user/task_0\n",
			Context{SlurmJob: "4243", SlurmSLUID: "s0A1B2C3D4E5F7", SlurmStep: "batch", Unit: "slurmstepd.scope", CgroupVersion: 2}},
		{"slurm SLUID v1", "7:memory:/slurm/uid_1000/s0A1B2C3D4E5F8/step_0/task_0\n",
			Context{SlurmJob: "s0A1B2C3D4E5F8", SlurmSLUID: "s0A1B2C3D4E5F8", SlurmStep: "0", CgroupVersion: 1}},
		{"not a SLUID: lower case, or 12 characters", "0::/system.slice/slurmstepd.scope/s0a1b2c3d4e5f6/x/s0A1B2C3D4E5\n",
			Context{Unit: "slurmstepd.scope", CgroupVersion: 2}},
		{"docker in docker", "0::/system.slice/docker-" + id + ".scope/docker/" + id + "\n",
			Context{Runtime: "docker", ContainerID: id, CgroupVersion: 2}},
		{"systemd service", "0::/system.slice/trainer.service\n", Context{Unit: "trainer.service", CgroupVersion: 2}},
		{"user session", "0::/user.slice/user-1000.slice/session-3.scope\n", Context{Unit: "session-3.scope", CgroupVersion: 2}},
		{"hybrid v1 root memory", "12:memory:/\n0::/system.slice/x.service\n", Context{Unit: "x.service", CgroupVersion: 2}},
		{"empty", "", Context{}},
		// A static pod's UID is the 32 hex digits of its manifest's hash.
		{"static pod systemd", "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + static + ".slice/cri-containerd-" + id + ".scope\n",
			Context{Runtime: "containerd", ContainerID: id, PodUID: static, QoS: "besteffort", CgroupVersion: 2}},
		{"static pod cgroupfs", "9:memory:/kubepods/burstable/pod" + static + "/" + id + "\n",
			Context{Runtime: "containerd", ContainerID: id, PodUID: static, QoS: "burstable", CgroupVersion: 1}},
		{"31 digits is no pod", "0::/kubepods.slice/kubepods-pod" + static[:31] + ".slice/x.scope\n",
			Context{Unit: "x.scope", CgroupVersion: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ParseCgroup(procfs.ParseCgroups([]byte(tt.file)))
			got.Cgroup = ""
			if got != tt.want {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestCommandName(t *testing.T) {
	tests := []struct {
		argv []string
		want string
	}{
		{[]string{"/usr/bin/python3", "-u", "train.py", "--lr", "1"}, "python3 train.py"},
		{[]string{"python", "-m", "torch.distributed.run", "x.py"}, "python -m torch.distributed.run"},
		{[]string{"/opt/bin/torchrun", "--nproc-per-node=2", "ddp.py"}, "torchrun ddp.py"},
		{[]string{"/usr/local/bin/gpu_burn", "60"}, "gpu_burn"},
		{[]string{"/usr/bin/python3", "/usr/local/bin/torchrun", "--nnodes=1", "ddp.py"}, "torchrun ddp.py"},
		{nil, "comm"},
	}
	for _, tt := range tests {
		if got := commandName("comm", tt.argv); got != tt.want {
			t.Errorf("commandName(%q) = %q, want %q", tt.argv, got, tt.want)
		}
	}
}

func TestPIDMap(t *testing.T) {
	fx := buildTree(t, "testdata/nested-pidns.tree")
	res, err := (&Attributor{Src: procfs.FS{Root: fx.root}}).Attribute(fx.gpu)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		ctr     string
		ns, pid int
		ok      bool
	}{
		{"9e8d7c6b", 1, 2101, true},
		{"9e8d7c6b", 14, 2102, true},
		{"", 14, 2102, true},
		{"4c5b", 1, 0, false}, // the outer container's id: not these processes
		{"9e8d7c6b", 99, 0, false},
	}
	for _, tt := range tests {
		pid, ok := res.HostPID(tt.ctr, tt.ns)
		if pid != tt.pid || ok != tt.ok {
			t.Errorf("HostPID(%q, %d) = %d, %v; want %d, %v", tt.ctr, tt.ns, pid, ok, tt.pid, tt.ok)
		}
	}
	if ns, ok := res.ContainerPID(2102); !ok || ns != 14 {
		t.Errorf("ContainerPID(2102) = %d, %v; want 14", ns, ok)
	}
	if _, ok := res.ContainerPID(1); ok {
		t.Errorf("host init mapped to a container PID")
	}
}
