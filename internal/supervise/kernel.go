package supervise

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/vramguard/vramguard/internal/lazyre"
)

var reKernelOOM = lazyre.New(`(?:Killed process|oom-kill:.*\bpid=|Memory cgroup out of memory: Killed process) ?(\d+)`)

// kernelOOM reads the kernel log (/dev/kmsg, where readable) for OOM kills
// of any PID in pids since the attempt started (uptime seconds).
func kernelOOM(pids map[int]bool, since float64) []string {
	// A raw non-blocking fd: through os.File the runtime poller would wait
	// for more records instead of returning EAGAIN at the end.
	fd, err := syscall.Open("/dev/kmsg", syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer syscall.Close(fd)
	var out []string
	buf := make([]byte, 8192)
	for {
		n, err := syscall.Read(fd, buf)
		if err == syscall.EPIPE {
			continue // records were overwritten while reading
		}
		if err != nil || n == 0 {
			break
		}
		rec := string(buf[:n])
		head, msg, ok := strings.Cut(rec, ";")
		if !ok {
			continue
		}
		fields := strings.Split(head, ",")
		if len(fields) >= 3 {
			if usec, err := strconv.ParseFloat(fields[2], 64); err == nil && usec/1e6 < since-1 {
				continue
			}
		}
		msg = strings.TrimSpace(strings.SplitN(msg, "\n", 2)[0])
		if m := reKernelOOM.FindStringSubmatch(msg); m != nil {
			if pid, _ := strconv.Atoi(m[1]); pids[pid] {
				out = append(out, "kernel: "+msg)
			}
		}
	}
	return out
}

func uptime() float64 {
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return 0
	}
	var up float64
	fmt.Sscanf(string(b), "%f", &up)
	return up
}
