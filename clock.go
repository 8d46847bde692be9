package idem

import "time"

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
