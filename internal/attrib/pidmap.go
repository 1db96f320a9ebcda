package attrib

// HostPID maps a PID as seen inside a container (its innermost PID
// namespace) to the host PID the driver reports, among the processes of r.
// containerID may be a prefix of the full id (as `docker ps` shows it).
func (r Result) HostPID(containerID string, nsPID int) (int, bool) {
	for _, j := range r.Jobs {
		if containerID != "" && !hasPrefix(j.Context.ContainerID, containerID) {
			continue
		}
		for _, p := range j.Processes {
			if p.ContainerPID == nsPID && len(p.NSpid) > 1 {
				return p.PID, true
			}
		}
	}
	return 0, false
}

// ContainerPID maps a host PID to the PID its own namespace shows.
func (r Result) ContainerPID(hostPID int) (int, bool) {
	for _, j := range r.Jobs {
		for _, p := range j.Processes {
			if p.PID == hostPID && len(p.NSpid) > 1 {
				return p.ContainerPID, true
			}
		}
	}
	return 0, false
}

func hasPrefix(s, p string) bool { return len(p) > 0 && len(s) >= len(p) && s[:len(p)] == p }
