package supervise

import "github.com/vramguard/vramguard/internal/postmortem"

// Postmortem and the types it holds live in package postmortem; these names
// keep the supervisor's code short.
type (
	Postmortem  = postmortem.Postmortem
	MemStats    = postmortem.MemStats
	Resume      = postmortem.Resume
	SkippedCkpt = postmortem.SkippedCkpt
)
