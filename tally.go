package idem

import (
	"context"
	"sync"
	"time"
)

// Counting replays and rejections.
//
// A replay must stay a read: writing a counter on every replay would put
// the hot path back on the disk's sync. So the Store adds counts up in
// memory and hands them to a Tallier backend in batches: every
// tallyInterval, at every Sweep, and at Close. A crash loses at most the
// counts gathered since the last batch, never a result.
//
// Replays answered from the Badger backend's hot set, the bulk of them, are
// counted with atomics in the hot entry itself (hotSet.count): no lock and
// no map lookup on the replay. Everything else (rejections, replays read
// from storage) is rarer, and is counted in a map under a mutex.

const (
	tallyInterval = time.Second
	// maxTallies bounds the records counted between two flushes; beyond it
	// the oldest counts are flushed early rather than memory growing.
	maxTallies = 1 << 16
)

type tallyKey struct{ scope, key string }

// tallies gathers counts between flushes.
type tallies struct {
	mu sync.Mutex // guards m
	m  map[tallyKey]*Tally
}

func (t *tallies) add(scope, key string, kind EventKind, at time.Time) (full bool) {
	t.mu.Lock()
	if t.m == nil {
		t.m = map[tallyKey]*Tally{}
	}
	k := tallyKey{scope, key}
	c := t.m[k]
	if c == nil {
		c = &Tally{Scope: scope, Key: key}
		t.m[k] = c
	}
	switch kind {
	case EventReplayed:
		c.Replays++
		c.LastReplay = at
	case EventInProgress:
		c.Conflicts++
		c.LastRejection = at
	case EventMismatch:
		c.Mismatches++
		c.LastRejection = at
	}
	full = len(t.m) >= maxTallies
	t.mu.Unlock()
	return full
}

// take returns the counts gathered since the last call, and forgets them.
func (t *tallies) take() map[tallyKey]*Tally {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.m
	t.m = nil
	return m
}

// takeTallies returns the counts gathered since the last call, one Tally
// per record: those of the map and those of the backend's hot set.
func (s *Store) takeTallies() []Tally {
	m := s.counts.take()
	if s.hot != nil {
		if m == nil {
			m = map[tallyKey]*Tally{}
		}
		s.hot.takeCounts(m)
	}
	if len(m) == 0 {
		return nil
	}
	out := make([]Tally, 0, len(m))
	for _, c := range m {
		out = append(out, *c)
	}
	return out
}

// count notes a replay or a rejection for the record's story.
func (s *Store) count(scope, key string, kind EventKind, at time.Time) {
	if s.tallier == nil {
		return
	}
	if s.counts.add(scope, key, kind, at) {
		s.flushSoon()
	}
}

// flushSoon asks the tally flusher to flush now rather than at its next
// tick.
func (s *Store) flushSoon() {
	select {
	case s.flushNow <- struct{}{}:
	default:
	}
}

// flushTallies hands the gathered counts to the backend.
func (s *Store) flushTallies(ctx context.Context) error {
	t := s.tallier
	if t == nil {
		return nil
	}
	batch := s.takeTallies()
	if len(batch) == 0 {
		return nil
	}
	_, err := call(s, func() (struct{}, error) { return struct{}{}, t.AddTallies(ctx, batch) })
	return err
}

// tallyLoop flushes counts every tallyInterval until the store stops. It
// keeps wall-clock time: the cadence of a flush decides nothing, and tests
// with a fake clock get their counts from Sweep.
func (s *Store) tallyLoop() {
	defer close(s.tallyDone)
	tick := time.NewTicker(tallyInterval)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-s.flushNow:
		case <-tick.C:
		}
		if err := s.flushTallies(context.Background()); err != nil {
			s.observeErr("tally", "", "", 0, err)
		}
	}
}
