package idemtest

import (
	"sort"
	"sync"
	"time"
)

// Clock is a fake idem.Clock for tests: time moves only when Advance or
// Set is called, and After channels fire when it passes their deadline.
type Clock struct {
	// mu guards now and waiters; changed is broadcast when waiters grow.
	mu      sync.Mutex
	changed *sync.Cond
	now     time.Time
	waiters []waiter
}

type waiter struct {
	at time.Time
	ch chan time.Time
}

// NewClock returns a fake clock reading start.
func NewClock(start time.Time) *Clock {
	c := &Clock{now: start}
	c.changed = sync.NewCond(&c.mu)
	return c
}

// Now returns the fake time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After returns a channel that receives the fake time once it reaches
// now+d.
func (c *Clock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, waiter{c.now.Add(d), ch})
	c.changed.Broadcast()
	return ch
}

// Advance moves the clock forward by d and fires every channel due.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.fire()
	c.mu.Unlock()
}

// Set moves the clock to t (forward or back) and fires every channel due.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.fire()
	c.mu.Unlock()
}

func (c *Clock) fire() {
	sort.Slice(c.waiters, func(i, j int) bool { return c.waiters[i].at.Before(c.waiters[j].at) })
	keep := c.waiters[:0]
	for _, w := range c.waiters {
		if !c.now.Before(w.at) {
			w.ch <- c.now
		} else {
			keep = append(keep, w)
		}
	}
	c.waiters = keep
}

// Waiters returns how many After channels are pending.
func (c *Clock) Waiters() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

// BlockUntil waits until at least n After channels are pending, so a test
// can advance time knowing that a goroutine is waiting on it.
func (c *Clock) BlockUntil(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.waiters) < n {
		c.changed.Wait()
	}
}
