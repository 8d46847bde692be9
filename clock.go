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

// wallClock is the Store's reading of the system clock: a wall-clock
// reading at most a second old, advanced by the monotonic clock since, so
// that a request costs one clock read rather than time.Now's two (see
// docs/replay-cache.md). A step of the wall clock shows within a second.
type wallClock struct {
	base atomic.Pointer[time.Time] // the latest wall-clock reading, with its monotonic one
}

// refresh takes a new wall-clock reading.
func (c *wallClock) refresh() {
	t := time.Now()
	c.base.Store(&t)
}

// latest returns the latest reading, or nil before the first: at most a
// second old when now is called, and coarseEvery old while the Store's
// clockLoop runs.
func (c *wallClock) latest() *time.Time { return c.base.Load() }

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

// A replay answered from the replay cache reads no clock: it is judged on
// the latest reading, refreshed every coarseEvery by the Store's
// clockLoop. It replays on that reading only if the record has more than
// coarseSlack to live by it; otherwise it is judged on a fresh reading. So
// expiry is exact unless the refresh stalls for over coarseSlack, and then
// late by no more than the stall's excess; a replay's count may carry a
// time up to coarseEvery early. Only the system clock is read this way:
// any other Clock is read on every request. See docs/replay-cache.md.
const (
	coarseEvery = 100 * time.Millisecond
	coarseSlack = time.Minute
)
