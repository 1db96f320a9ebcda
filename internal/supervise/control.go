package supervise

import "github.com/vramguard/vramguard/internal/runctl"

// RestartSignal asks the supervisor to restart the running attempt now
// (runctl documents the signals a supervisor takes).
const RestartSignal = runctl.RestartSignal
