package idem

import (
	"context"
	"errors"
	"sync"
)

// flightKey names one stale claim: a claim's token never repeats, so a
// resolution of (scope, key, token) is one resolution of one claim.
type flightKey struct {
	scope, key string
	token      uint64
}

// flight is one resolution in progress; done is closed when it ends.
type flight struct {
	done    chan struct{}
	verdict Verdict
	err     error
}

// flights lets one resolution per stale claim ask the Resolver at a time:
// the requests that meet the claim meanwhile wait for its verdict rather
// than asking the downstream again (a stampede of retries after a crash
// would otherwise query it once per retry). The zero value is ready.
type flights struct {
	mu      sync.Mutex
	m       map[flightKey]*flight
	waiting int // requests waiting on a flight, for tests
}

// join returns the claim's flight, and whether the caller leads it (and
// must end it with land).
func (g *flights) join(rec *Record) (*flight, bool) {
	k := flightKey{rec.Scope, rec.Key, rec.Token}
	g.mu.Lock()
	defer g.mu.Unlock()
	if f, ok := g.m[k]; ok {
		g.waiting++
		return f, false
	}
	if g.m == nil {
		g.m = make(map[flightKey]*flight)
	}
	f := &flight{done: make(chan struct{})}
	g.m[k] = f
	return f, true
}

// land ends the leader's flight with its answer.
func (g *flights) land(rec *Record, f *flight, v Verdict, err error) {
	g.mu.Lock()
	delete(g.m, flightKey{rec.Scope, rec.Key, rec.Token})
	g.mu.Unlock()
	f.verdict, f.err = v, err
	close(f.done)
}

// wait waits, as long as ctx allows, for the leader's answer. A leader
// whose own request ended answers nothing: the waiter reads the record
// again (VerdictUnknown with a nil error) and may lead the next flight.
func (g *flights) wait(ctx context.Context, f *flight) (Verdict, error) {
	defer func() {
		g.mu.Lock()
		g.waiting--
		g.mu.Unlock()
	}()
	select {
	case <-ctx.Done():
		return VerdictUnknown, ctx.Err()
	case <-f.done:
	}
	if errors.Is(f.err, context.Canceled) || errors.Is(f.err, context.DeadlineExceeded) {
		return VerdictUnknown, nil
	}
	return f.verdict, f.err
}

func (g *flights) waiters() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.waiting
}
