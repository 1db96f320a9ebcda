package attrib

import (
	"strings"

	"github.com/vramguard/vramguard/internal/lazyre"

	"github.com/vramguard/vramguard/internal/procfs"
)

// Context is what a process's cgroup says about where it runs.
type Context struct {
	// Runtime is the container runtime: docker, containerd, cri-o or podman.
	Runtime     string `json:"runtime,omitempty"`
	ContainerID string `json:"container_id,omitempty"`
	// PodUID is the Kubernetes pod's UID (with dashes, as the API shows it).
	PodUID string `json:"pod_uid,omitempty"`
	// Namespace and PodName are the pod's, when the kubelet's pod log
	// directory names them (Attributor.Pods); the cgroup path does not.
	Namespace string `json:"namespace,omitempty"`
	PodName   string `json:"pod_name,omitempty"`
	// QoS is the pod's Kubernetes QoS class cgroup (guaranteed, burstable,
	// besteffort) when the path shows it.
	QoS string `json:"qos,omitempty"`
	// SlurmJob is the Slurm job the cgroup names: its id (job_N), else
	// its SLUID (Slurm 26.05 names a job's cgroup by either); SlurmSLUID
	// is the SLUID when the path has one.
	SlurmJob   string `json:"slurm_job,omitempty"`
	SlurmSLUID string `json:"slurm_sluid,omitempty"`
	SlurmStep  string `json:"slurm_step,omitempty"`
	// Unit is the innermost systemd unit (.service or .scope) in the path.
	Unit string `json:"systemd_unit,omitempty"`
	// Cgroup is the path the context was read from, and CgroupVersion 1 or 2.
	Cgroup        string `json:"cgroup,omitempty"`
	CgroupVersion int    `json:"cgroup_version,omitempty"`
}

// PodRef names the pod for people: namespace/name when known, else the
// first 8 characters of its UID; "" outside a pod.
func (c Context) PodRef() string {
	switch {
	case c.PodName != "":
		return c.Namespace + "/" + c.PodName
	case len(c.PodUID) > 8:
		return c.PodUID[:8]
	}
	return c.PodUID
}

// Scope is a key that is equal for processes in the same container, pod,
// SLURM job or unit; the rollup never climbs across a change of scope.
func (c Context) Scope() string {
	kind, id := c.scope()
	if kind == "" {
		return ""
	}
	return kind + id
}

// scope is Scope in two parts, so that comparing scopes builds no string.
func (c Context) scope() (kind, id string) {
	switch {
	case c.ContainerID != "":
		return "ctr:", c.ContainerID
	case c.PodUID != "":
		return "pod:", c.PodUID
	case c.SlurmJob != "":
		return "slurm:", c.SlurmJob
	case c.Unit != "":
		return "unit:", c.Unit
	}
	return "", ""
}

// sameScope is a.Scope() == b.Scope().
func sameScope(a, b Context) bool {
	ka, ia := a.scope()
	kb, ib := b.scope()
	return ka == kb && ia == ib
}

var (
	hex64 = `([0-9a-f]{64})`
	// Container scopes and directories, systemd driver first.
	reCtr = []struct {
		re      *lazyre.RE
		runtime string
	}{
		{lazyre.New(`(?:^|/)docker-` + hex64 + `\.scope$`), "docker"},
		{lazyre.New(`(?:^|/)cri-containerd-` + hex64 + `\.scope$`), "containerd"},
		{lazyre.New(`(?:^|/)crio-` + hex64 + `\.scope$`), "cri-o"},
		{lazyre.New(`(?:^|/)libpod-` + hex64 + `\.scope(?:/container)?$`), "podman"},
		{lazyre.New(`(?:^|/)nerdctl-` + hex64 + `\.scope$`), "containerd"},
		// cgroupfs driver: /docker/<id>, /libpod_parent/libpod-<id>,
		// /kubepods/<qos>/pod<uid>/<id> (runtime from elsewhere).
		{lazyre.New(`(?:^|/)docker/` + hex64 + `$`), "docker"},
		{lazyre.New(`/libpod-` + hex64 + `(?:/container)?$`), "podman"},
		{lazyre.New(`/crio-` + hex64 + `$`), "cri-o"},
		{lazyre.New(`/pod(?:[0-9a-f_-]{36}|[0-9a-f]{32})/` + hex64 + `$`), ""},
		// containerd without Kubernetes (ctr, nerdctl with cgroupfs).
		{lazyre.New(`^/(?:default|k8s\.io|moby)/` + hex64 + `$`), "containerd"},
	}
	// A pod's UID as the API gives it, or a static pod's (the 32 hex
	// digits of its manifest's hash).
	rePod      = lazyre.New(`pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}|[0-9a-f]{32})(?:\.slice)?(?:/|$)`)
	reQoS      = lazyre.New(`kubepods[-/](burstable|besteffort)`)
	reSlurmJob = lazyre.New(`(?:^|/)job_([0-9]+)(?:/|$)`)
	// a SLUID: "s" and 13 of Crockford's base32 ([0-9A-Z]), a directory
	// of its own below slurmstepd.scope (v2) or /slurm (v1)
	reSLUID    = lazyre.New(`(?:^|/)(s[0-9A-Z]{13})(?:/|$)`)
	reSlurmStp = lazyre.New(`(?:^|/)step_([0-9a-z_]+)(?:/|$)`)
	reUnit     = lazyre.New(`([^/]+\.(?:service|scope))(?:/|$)`)
)

// ParseCgroup derives the context from /proc/<pid>/cgroup lines. On cgroup v2
// it reads the unified line; on v1 it prefers the hierarchies that container
// runtimes and SLURM always place a task in.
func ParseCgroup(entries []procfs.CgroupEntry) Context {
	path, version := pickCgroup(entries)
	c := Context{Cgroup: path, CgroupVersion: version}
	if path == "" {
		return c
	}
	// The cheap tests come first: every container pattern needs 64 hex
	// digits, a pod "kubepods", a SLURM job "slurm", a unit its suffix.
	if has64Hex(path) {
		for _, r := range reCtr {
			if m := r.re.FindStringSubmatch(path); m != nil {
				c.ContainerID, c.Runtime = m[1], r.runtime
				break
			}
		}
	}
	if m := findIf(rePod, path, "kubepods"); m != nil {
		c.PodUID = strings.ReplaceAll(m[1], "_", "-")
		c.QoS = "guaranteed"
		if q := reQoS.FindStringSubmatch(path); q != nil {
			c.QoS = q[1]
		}
		if c.Runtime == "" && c.ContainerID != "" {
			// cgroupfs driver: the path does not name the runtime. The
			// kubelet's default since 1.24 is containerd.
			c.Runtime = "containerd"
			if strings.Contains(path, "crio") {
				c.Runtime = "cri-o"
			}
		}
	}
	if m := findIf(reSlurmJob, path, "slurm"); m != nil {
		c.SlurmJob = m[1]
	}
	if m := findIf(reSLUID, path, "slurm"); m != nil {
		c.SlurmSLUID = m[1]
		if c.SlurmJob == "" {
			c.SlurmJob = m[1]
		}
	}
	if c.SlurmJob != "" {
		if s := reSlurmStp.FindStringSubmatch(path); s != nil {
			c.SlurmStep = s[1]
		}
	}
	if c.ContainerID == "" && (strings.Contains(path, ".service") || strings.Contains(path, ".scope")) {
		if ms := reUnit.FindAllStringSubmatch(path, -1); ms != nil {
			c.Unit = ms[len(ms)-1][1]
		}
	}
	return c
}

// findIf is re.FindStringSubmatch(s) when s contains need, else nil.
func findIf(re *lazyre.RE, s, need string) []string {
	if !strings.Contains(s, need) {
		return nil
	}
	return re.FindStringSubmatch(s)
}

// has64Hex reports whether s holds 64 lowercase hex digits in a row.
func has64Hex(s string) bool {
	run := 0
	for i := 0; i < len(s); i++ {
		if c := s[i]; '0' <= c && c <= '9' || 'a' <= c && c <= 'f' {
			if run++; run == 64 {
				return true
			}
		} else {
			run = 0
		}
	}
	return false
}

// pickCgroup chooses the line that carries the most: v2's unified "0::"
// line when it is the only hierarchy or v1 has nothing better, else v1's
// memory, pids, cpu or name=systemd hierarchy.
func pickCgroup(entries []procfs.CgroupEntry) (string, int) {
	var unified string
	hasUnified, v1 := false, map[string]string{}
	for _, e := range entries {
		if e.ID == 0 && len(e.Controllers) == 0 {
			unified, hasUnified = e.Path, true
			continue
		}
		for _, c := range e.Controllers {
			v1[c] = e.Path
		}
	}
	for _, c := range []string{"memory", "pids", "cpu", "name=systemd", "devices", "cpuset"} {
		if p, ok := v1[c]; ok && p != "/" && p != "" {
			return p, 1
		}
	}
	if hasUnified {
		return unified, 2
	}
	for _, p := range v1 {
		return p, 1
	}
	return "", 0
}
