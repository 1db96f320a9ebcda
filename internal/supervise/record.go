package supervise

import (
	"context"
	"time"

	"github.com/vramguard/vramguard/internal/store"
)

// recordRetries bounds how long the run's end is retried when the store
// cannot be written (a full disk): the job is over by then, so waiting
// costs only vramguard's exit.
var recordRetries = []time.Duration{100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 2 * time.Second}

// finishRun records the run's end, retrying a failing store for a few
// seconds. A store that stays unwritable never changes how vramguard ends
// (the job's status): it is said on the terminal, and `vramguard runs` will
// show the run lost.
func (s *supervisor) finishRun(ctx context.Context, reason string, exitCode int, end time.Time, postmortem []byte) {
	ctx = context.WithoutCancel(ctx)
	err := s.o.Store.FinishRun(ctx, s.o.RunID, store.StatusFinished, reason, exitCode, end, postmortem)
	for _, d := range recordRetries {
		if err == nil {
			return
		}
		time.Sleep(d)
		err = s.o.Store.FinishRun(ctx, s.o.RunID, store.StatusFinished, reason, exitCode, end, postmortem)
	}
	if err != nil {
		s.notifyf("could not record the end of run %s in the state database: %v", s.o.RunID, err)
	}
}
