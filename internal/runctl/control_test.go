package runctl

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/vramguard/vramguard/internal/procfs"
	"github.com/vramguard/vramguard/internal/store"
)

// TestSignalSupervisor checks what is refused before any signal is sent.
func TestSignalSupervisor(t *testing.T) {
	me, err := procfs.FS{}.Proc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		run  store.Run
		want string
	}{
		{"finished", store.Run{ID: "a", Status: store.StatusFinished, Reason: "success", SupervisorPID: os.Getpid()}, "run a is not running (finished, reason success)"},
		{"lost", store.Run{ID: "b", Status: store.StatusLost, SupervisorPID: os.Getpid()}, "run b is not running (lost, reason -)"},
		{"pid reused", store.Run{ID: "c", Status: store.StatusRunning, SupervisorPID: os.Getpid(), SupervisorStart: me.StartTicks + 1}, "the supervisor of run c"},
		{"no pid", store.Run{ID: "d", Status: store.StatusRunning}, "the supervisor of run d (pid 0) is gone"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := SignalSupervisor(procfs.FS{}, &tt.run, RestartSignal)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrNotRunning) {
				t.Errorf("got %v, want %q matching ErrNotRunning", err, tt.want)
			}
		})
	}
}
