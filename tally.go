package idem

import (
	"context"
	"strings"
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

const (
	tallyInterval = time.Second
	// maxTallies bounds the records counted between two flushes; beyond it
	// the oldest counts are flushed early rather than memory growing.
	maxTallies = 1 << 16
	// tallyChunk bounds the records one AddTallies call rewrites. Each
	// counted record is written again, whole, and a Badger transaction
	// holds 15% of a memtable (614 KiB by default): 128 records of up to
	// ~4 KiB each fit, where a second's worth of replays of thousands of
	// keys in one call was refused as too big, and its counts lost.
	tallyChunk = 128
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
	c := t.m[tallyKey{scope, key}]
	if c == nil {
		// The counts outlive the request: keep copies of its strings, not
		// the caller's. A caller's key is a few bytes in a span of the
		// caller's allocations, and holding it would pin the whole span
		// (with 10,000 replayed keys among 1M loaded, ~60 MiB of heap).
		scope, key = strings.Clone(scope), strings.Clone(key)
		c = &Tally{Scope: scope, Key: key}
		t.m[tallyKey{scope, key}] = c
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

func (t *tallies) take() []Tally {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.m) == 0 {
		return nil
	}
	out := make([]Tally, 0, len(t.m))
	for _, c := range t.m {
		out = append(out, *c)
	}
	t.m = nil
	return out
}

// count notes a replay or a rejection for the record's story.
func (s *Store) count(scope, key string, kind EventKind, at time.Time) {
	if s.tallier == nil {
		return
	}
	if s.counts.add(scope, key, kind, at) {
		select {
		case s.flushNow <- struct{}{}:
		default:
		}
	}
}

// flushTallies hands the gathered counts to the backend.
func (s *Store) flushTallies(ctx context.Context) error {
	t := s.tallier
	if t == nil {
		return nil
	}
	batch := s.counts.take()
	var first error
	for len(batch) > 0 {
		chunk := batch[:min(len(batch), tallyChunk)]
		batch = batch[len(chunk):]
		// A chunk that fails loses its counts only; the others still go.
		_, err := call(s, func() (struct{}, error) { return struct{}{}, t.AddTallies(ctx, chunk) })
		if first == nil {
			first = err
		}
	}
	return first
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
