package idem

// ResolveWaiters returns how many requests wait on another's resolution of
// a stale claim, for the stampede test.
func ResolveWaiters(s *Store) int { return s.flights.waiters() }
