package testbin

import (
	"sync"
	"time"
)

// Clock is a fake clock a test advances by hand: Now returns the time it
// was made with plus every Add since. It is safe for concurrent use (a
// sampler's loop reads it while the test advances it).
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock is a Clock that reads t until advanced.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Add advances the clock by d.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}
