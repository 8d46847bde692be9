package idem

import (
	"sync/atomic"
	"time"
)

// Clock is the store's source of time. Expiry, leases and recovery back-off
// are all decided with it, never with Badger's wall-clock TTL, so tests
// inject a fake one and move time without sleeping.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// After returns a channel that receives once d has passed on this clock.
	After(d time.Duration) <-chan time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time                         { return time.Now() }
func (systemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// SystemClock returns the wall clock.
func SystemClock() Clock { return systemClock{} }

// wallClock is the Store's reading of the system clock: the time of a
// wall-clock reading taken at most a second before, advanced by the
// monotonic clock since. That is one clock read per call rather than
// time.Now's two (wall and monotonic), which counts on the replay path: on
// a virtual machine one read can cost 50 ns, as much as the rest of a
// replay. Between readings it follows the monotonic clock, as comparisons
// of times read in one process already do; a step of the wall clock shows
// within a second.
type wallClock struct {
	base atomic.Pointer[time.Time] // the latest wall-clock reading, with its monotonic one
}

func (c *wallClock) now() time.Time {
	if b := c.base.Load(); b != nil {
		if d := time.Since(*b); d >= 0 && d < time.Second {
			return b.Add(d)
		}
	}
	t := time.Now()
	c.base.Store(&t)
	return t
}
