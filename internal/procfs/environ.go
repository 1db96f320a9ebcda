package procfs

import (
	"bytes"
	"strconv"
)

// Environ reads /proc/<pid>/environ: the environment the process was
// started with (a process's own later changes are not in it). Readable for
// one's own processes, or as root.
func (fs FS) Environ(pid int) ([]string, error) {
	return readFile(fs, pid, "environ", parseCmdline)
}

// ZombieStatus reads the wait status (as waitpid reports it) of pid from
// field 52 of /proc/<pid>/stat, which the kernel fills only once the
// process has exited and until its parent reaps it. ok is false for a
// process that is not a zombie (running, or already reaped).
func (fs FS) ZombieStatus(pid int) (status int, ok bool) {
	return readFile2(fs, pid, "stat", parseZombieStatus)
}

func parseZombieStatus(b []byte) (int, bool) {
	closeIdx := bytes.LastIndexByte(b, ')')
	if closeIdx < 0 {
		return 0, false
	}
	fields := bytes.Fields(b[closeIdx+1:])
	// fields[0] is field 3 (state); field 52 is exit_code
	if len(fields) < 50 || (string(fields[0]) != "Z" && string(fields[0]) != "X") {
		return 0, false
	}
	v, err := strconv.Atoi(string(fields[49]))
	if err != nil {
		return 0, false
	}
	return v, true
}

func readFile2(fs FS, pid int, name string, parse func([]byte) (int, bool)) (int, bool) {
	type res struct {
		v  int
		ok bool
	}
	r, err := readFile(fs, pid, name, func(b []byte) res { v, ok := parse(b); return res{v, ok} })
	if err != nil {
		return 0, false
	}
	return r.v, r.ok
}
