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

// A replay answered from the hot set reads no clock: it is judged on the
// latest reading of the wallClock, which the Store's clockLoop refreshes
// every coarseEvery, because a fresh reading costs as much as the rest of
// the replay. That reading may be late, so a record replays on it only if
// it has more than coarseSlack to live by it; a record nearer its expiry
// (or past it) is judged again on a fresh reading. Expiry is thus judged as
// on a fresh reading as long as the latest reading is less than coarseSlack
// old: only a clockLoop stalled for over a minute (the process stopped or
// starved that long) lets a record replay after its expiry, and then by no
// more than the stall's excess over the minute. A step of the wall clock
// shows within coarseEvery, as it shows within a second in wallClock.now.
// The count of such a replay carries the reading's time, up to coarseEvery
// early. The refresh costs ten wake-ups a second while the store is open.
// The Store does this with the system clock only: any other Clock is read
// for every replay, so that a test's clock is obeyed exactly.
const (
	coarseEvery = 100 * time.Millisecond
	coarseSlack = time.Minute
)
