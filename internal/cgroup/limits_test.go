package cgroup

import (
	"testing"

	"github.com/vramguard/vramguard/internal/testbin"
)

func TestLimitsOf(t *testing.T) {
	const gib = 1 << 30
	scope := "sys/fs/cgroup/user.slice/user-1000.slice/session-3.scope/"
	tests := []struct {
		name  string
		self  bool // read /proc/self, as LimitsOf(0) does
		files map[string]string
		want  Limits
	}{
		{
			name: "v2 without limits",
			files: map[string]string{
				"proc/42/cgroup":                      "0::/user.slice/user-1000.slice/session-3.scope\n",
				"sys/fs/cgroup/cgroup.controllers":    "cpuset cpu io memory pids\n",
				scope + "memory.max":                  "max\n",
				scope + "cpu.max":                     "max 100000\n",
				"sys/fs/cgroup/user.slice/memory.max": "max\n",
			},
			want: Limits{Version: "v2"},
		},
		{
			name: "v2: an ancestor's limit is tighter than the cgroup's own",
			files: map[string]string{
				"proc/42/cgroup":                      "0::/user.slice/user-1000.slice/session-3.scope\n",
				"sys/fs/cgroup/cgroup.controllers":    "memory\n",
				scope + "memory.max":                  "34359738368\n",
				"sys/fs/cgroup/user.slice/memory.max": "17179869184\n",
			},
			want: Limits{Version: "v2", MemoryBytes: 16 * gib, MemoryFile: "/sys/fs/cgroup/user.slice/memory.max"},
		},
		{
			name: "v2 container at its namespace's root",
			files: map[string]string{
				"proc/42/cgroup":                   "0::/\n",
				"sys/fs/cgroup/cgroup.controllers": "cpu memory\n",
				"sys/fs/cgroup/memory.max":         "2147483648\n",
				"sys/fs/cgroup/cpu.max":            "200000 100000\n",
			},
			want: Limits{Version: "v2", MemoryBytes: 2 * gib, MemoryFile: "/sys/fs/cgroup/memory.max", CPUs: 2, CPUFile: "/sys/fs/cgroup/cpu.max"},
		},
		{
			name: "v2 half a CPU",
			files: map[string]string{
				"proc/42/cgroup":                   "0::/\n",
				"sys/fs/cgroup/cgroup.controllers": "cpu\n",
				"sys/fs/cgroup/cpu.max":            "50000 100000\n",
			},
			want: Limits{Version: "v2", CPUs: 0.5, CPUFile: "/sys/fs/cgroup/cpu.max"},
		},
		{
			name: "v2 cpu.max without a period takes the default",
			files: map[string]string{
				"proc/42/cgroup":                   "0::/\n",
				"sys/fs/cgroup/cgroup.controllers": "cpu\n",
				"sys/fs/cgroup/cpu.max":            "150000\n",
			},
			want: Limits{Version: "v2", CPUs: 1.5, CPUFile: "/sys/fs/cgroup/cpu.max"},
		},
		{
			name: "v2 not mounted: no hierarchy",
			files: map[string]string{
				"proc/42/cgroup":           "0::/\n",
				"sys/fs/cgroup/memory.max": "2147483648\n",
			},
			want: Limits{},
		},
		{
			name: "v1 docker: co-mounted cpu,cpuacct, the root's no-limit ignored",
			files: map[string]string{
				"proc/42/cgroup": "12:pids:/docker/abc\n4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n",
				"sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes":  "4294967296\n",
				"sys/fs/cgroup/memory/memory.limit_in_bytes":             "9223372036854771712\n",
				"sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us":  "400000\n",
				"sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000\n",
				"sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us":             "-1\n",
			},
			want: Limits{Version: "v1", MemoryBytes: 4 * gib, MemoryFile: "/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes",
				CPUs: 4, CPUFile: "/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us"},
		},
		{
			name: "v1 unlimited",
			files: map[string]string{
				"proc/42/cgroup": "4:memory:/\n3:cpu,cpuacct:/\n",
				"sys/fs/cgroup/memory/memory.limit_in_bytes":  "9223372036854771712\n",
				"sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us":  "-1\n",
				"sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000\n",
			},
			want: Limits{Version: "v1"},
		},
		{
			name: "v1 quota over a custom period",
			files: map[string]string{
				"proc/42/cgroup":                          "3:cpu:/job\n",
				"sys/fs/cgroup/cpu/job/cpu.cfs_quota_us":  "75000\n",
				"sys/fs/cgroup/cpu/job/cpu.cfs_period_us": "50000\n",
			},
			want: Limits{Version: "v1", CPUs: 1.5, CPUFile: "/sys/fs/cgroup/cpu/job/cpu.cfs_quota_us"},
		},
		{
			name: "v1 host cgroup namespace with only the container's cgroup mounted",
			files: map[string]string{
				"proc/42/cgroup": "4:memory:/docker/abc\n",
				"sys/fs/cgroup/memory/memory.limit_in_bytes": "1073741824\n",
			},
			want: Limits{Version: "v1", MemoryBytes: gib, MemoryFile: "/sys/fs/cgroup/memory/memory.limit_in_bytes"},
		},
		{
			name: "hybrid: the tightest of v1 memory and the unified hierarchy",
			files: map[string]string{
				"proc/42/cgroup": "4:memory:/job\n1:name=systemd:/job\n0::/job\n",
				"sys/fs/cgroup/unified/cgroup.controllers":       "\n",
				"sys/fs/cgroup/unified/job/memory.max":           "max\n",
				"sys/fs/cgroup/memory/job/memory.limit_in_bytes": "104857600\n",
			},
			want: Limits{Version: "hybrid", MemoryBytes: 100 << 20, MemoryFile: "/sys/fs/cgroup/memory/job/memory.limit_in_bytes"},
		},
		{
			name: "pid 0 is the caller",
			self: true,
			files: map[string]string{
				"proc/self/cgroup":                 "0::/\n",
				"proc/42/cgroup":                   "0::/other\n",
				"sys/fs/cgroup/cgroup.controllers": "memory\n",
				"sys/fs/cgroup/memory.max":         "536870912\n",
				"sys/fs/cgroup/other/memory.max":   "1024\n",
			},
			want: Limits{Version: "v2", MemoryBytes: 512 << 20, MemoryFile: "/sys/fs/cgroup/memory.max"},
		},
		{
			name: "garbage is no limit",
			files: map[string]string{
				"proc/42/cgroup":                   "0::/\n",
				"sys/fs/cgroup/cgroup.controllers": "memory cpu\n",
				"sys/fs/cgroup/memory.max":         "lots\n",
				"sys/fs/cgroup/cpu.max":            "inf 100000\n",
			},
			want: Limits{Version: "v2"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pid := 42
			if tt.self {
				pid = 0
			}
			got, err := Reader{Root: testbin.WriteTree(t, tt.files)}.LimitsOf(pid)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
	if _, err := (Reader{Root: t.TempDir()}).LimitsOf(42); err == nil {
		t.Error("no /proc/42/cgroup: want an error")
	}
}
