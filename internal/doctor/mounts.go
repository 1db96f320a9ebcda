package doctor

import (
	"fmt"
	"path"
	"strconv"
	"strings"
)

// Mount is one line of /proc/<pid>/mountinfo.
type Mount struct {
	ID         int
	Device     string // "major:minor"
	MountPoint string
	FSType     string
	Source     string
	Options    string // per-mount and super-block options, joined
}

// readMountInfo reads and parses a mountinfo file under env.Root.
func readMountInfo(env *Env, p string) ([]Mount, error) {
	b, err := env.readFile(p)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	return parseMountInfo(string(b)), nil
}

// parseMountInfo parses mountinfo(5) lines; malformed lines are skipped.
func parseMountInfo(s string) []Mount {
	var out []Mount
	for _, line := range strings.Split(s, "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		f := strings.Fields(pre)
		g := strings.Fields(post)
		if len(f) < 6 || len(g) < 2 {
			continue
		}
		id, _ := strconv.Atoi(f[0])
		m := Mount{ID: id, Device: f[2], MountPoint: unescapeMount(f[4]), FSType: g[0], Source: g[1], Options: f[5]}
		if len(g) > 2 {
			m.Options += "," + g[2]
		}
		out = append(out, m)
	}
	return out
}

// unescapeMount undoes the octal escapes (\040 for a space) of mountinfo.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// mountFor returns the mount holding p: the longest mount point that is p or
// one of its ancestors; among equal mount points the last one mounted (it
// hides the earlier ones).
func mountFor(mounts []Mount, p string) (Mount, bool) {
	p = path.Clean("/" + p)
	best, found := Mount{}, false
	for _, m := range mounts {
		mp := m.MountPoint
		if !(p == mp || mp == "/" || strings.HasPrefix(p, mp+"/")) {
			continue
		}
		if !found || len(mp) >= len(best.MountPoint) {
			best, found = m, true
		}
	}
	return best, found
}

// mountOption returns the value of key=value in a mount's options.
func mountOption(m Mount, key string) (string, bool) {
	for _, o := range strings.Split(m.Options, ",") {
		if k, v, ok := strings.Cut(o, "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}

// Container says whether the examined system runs inside a container and
// how that was seen.
type Container struct {
	Inside   bool   `json:"inside"`
	Kind     string `json:"kind,omitempty"` // docker, podman, kubernetes, lxc, containerd, nspawn, container
	Evidence string `json:"evidence,omitempty"`
	// OwnPIDNS is true when PID 1 is not the host's init, so PIDs that NVML
	// reports (host PIDs) do not name processes here.
	OwnPIDNS bool   `json:"own_pid_namespace"`
	PID1     string `json:"pid1,omitempty"`
}

func detectContainer(env *Env, mounts []Mount) Container {
	var c Container
	set := func(kind, ev string) {
		if !c.Inside {
			c.Inside, c.Kind, c.Evidence = true, kind, ev
		}
	}
	if env.getenv("KUBERNETES_SERVICE_HOST") != "" {
		set("kubernetes", "$KUBERNETES_SERVICE_HOST is set")
	}
	if env.exists("/.dockerenv") {
		set("docker", "/.dockerenv exists")
	}
	if env.exists("/run/.containerenv") {
		set("podman", "/run/.containerenv exists")
	}
	if b, err := env.readFile("/run/systemd/container"); err == nil {
		set(strings.TrimSpace(string(b)), "/run/systemd/container says "+strings.TrimSpace(string(b)))
	}
	if b, err := env.readFile("/proc/1/cgroup"); err == nil {
		s := string(b)
		for _, k := range []struct{ needle, kind string }{
			{"kubepods", "kubernetes"}, {"docker", "docker"}, {"libpod", "podman"},
			{"containerd", "containerd"}, {"lxc", "lxc"},
		} {
			if strings.Contains(s, k.needle) {
				set(k.kind, "/proc/1/cgroup mentions "+k.needle)
				break
			}
		}
	}
	if m, ok := mountFor(mounts, "/"); ok && isOverlay(m.FSType) {
		set("container", "the root filesystem is "+m.FSType)
	}
	if b, err := env.readFile("/proc/1/comm"); err == nil {
		c.PID1 = strings.TrimSpace(string(b))
	}
	if c.Inside {
		switch c.PID1 {
		case "systemd", "init":
			// docker --pid=host, or a system container with its own init:
			// either way PIDs here are the ones NVML would report.
		default:
			c.OwnPIDNS = true
		}
	}
	return c
}

func isOverlay(fstype string) bool {
	switch fstype {
	case "overlay", "overlayfs", "aufs", "fuse-overlayfs", "fuse.fuse-overlayfs":
		return true
	}
	return false
}
