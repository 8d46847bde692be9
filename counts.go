package idem

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/idemkit/idem/backend"
)

// Counting replays and rejections.
//
// A replay must stay a read: writing a counter on every replay would put
// the hot path back on the disk. So the Store adds counts up in memory and
// hands them to a Tallier backend in batches, every Options.CountInterval
// (longer when flushes take long, see tallyLoop), at every Sweep a caller
// asks for, and at Close: a record replayed any number of times in an
// interval costs one write. The table of pending counts is bounded by the
// memory budget; when it is full a count that would need a new place is
// dropped, never flushed early (an early flush is the write per replay
// this avoids), and the count ledger (countledger.go) records the period,
// so that the records concerned read as approximate. A crash loses at most
// the counts gathered since the last flush, never a result, and the next
// open records that period too. docs/contract.md ("Counts") states the
// rule.
//
// Replays answered from the replay cache, and replays read from the
// backend of records the cache takes, the bulk of them, are counted in the
// cache's entry itself, under the shard lock the replay takes anyway.
// Everything else (rejections, replays of records too large to cache) is
// rarer, and is counted in a map under a mutex.

// flushSpacing is how many times as long as a flush took the next one
// waits, at least Options.CountInterval.
const flushSpacing = 20

type tallyKey struct{ scope, key string }

// tallies gathers counts between flushes.
type tallies struct {
	// limit bounds the records counted between two flushes (the memory
	// budget's share, memory.go); past it the counts of other records are
	// dropped (and the loss recorded) rather than memory growing.
	limit int
	// flushing serialises flushes: a Sweep's flush then returns only
	// after the interval's flush already in flight has handed its counts
	// over.
	flushing sync.Mutex
	mu       sync.Mutex // guards m
	m        map[tallyKey]*backend.Tally
}

// add counts one event of kind on the record of (scope, key), unless the
// record has no place yet and the table is full: then it reports dropped.
func (t *tallies) add(scope, key string, kind EventKind, at, expiresAt time.Time, token uint64) (dropped bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[tallyKey]*backend.Tally{}
	}
	c := t.m[tallyKey{scope, key}]
	if c == nil {
		if len(t.m) >= t.limit {
			return true
		}
		// Copies: the caller's strings may share memory with a large
		// request, which the map would otherwise keep alive.
		scope, key = strings.Clone(scope), strings.Clone(key)
		c = &backend.Tally{Scope: scope, Key: key}
		t.m[tallyKey{scope, key}] = c
	}
	if expiresAt.After(c.ExpiresAt) {
		c.ExpiresAt = expiresAt
	}
	c.Token = max(c.Token, token)
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
	return false
}

// take returns the counts gathered since the last call, and forgets them.
func (t *tallies) take() map[tallyKey]*backend.Tally {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.m
	t.m = nil
	return m
}

// takeTallies returns the counts gathered since the last call: those of
// the map, one Tally per record, then those of the replay cache, one per
// counted entry (a record may have two; backends add them up).
func (s *Store) takeTallies() []backend.Tally {
	m := s.counts.take()
	var out []backend.Tally
	for _, c := range m {
		out = append(out, *c)
	}
	return s.hot.takeCounts(out)
}

// count notes a replay or a rejection of rec, the record of (scope, key),
// for its story.
func (s *Store) count(scope, key string, rec *Record, kind EventKind, at time.Time) {
	if s.tallier == nil {
		return
	}
	var expiresAt time.Time
	var token uint64
	if rec.State == StateDone {
		expiresAt, token = rec.ExpiresAt, rec.Token
	}
	if s.counts.add(scope, key, kind, at, expiresAt, token) {
		s.ledger.dropped.Store(true)
	}
}

// counting runs fn, which counts an answer read from the backend, as a
// backend call does: unless Close has begun draining the calls, in which
// case it reports false and the answer is not given (ErrClosed). So a
// count taken on such an answer is in Close's last flush, which runs once
// the calls are drained.
func (s *Store) counting(fn func()) bool {
	s.ops.Add(1)
	defer s.leave()
	if s.closed.Load() {
		return false
	}
	fn()
	return true
}

// countReplay counts a replay of rec, a done record read from the backend,
// and keeps rec in the replay cache: the count goes into the cache's new
// entry, or, for a record the cache does not take, into the map.
func (s *Store) countReplay(scope, key string, rec *Record, at time.Time) {
	count := s.tallier != nil
	kept, dropped := s.hot.putRead(scope, key, rec, count, at)
	if dropped {
		s.ledger.dropped.Store(true)
	}
	if !kept && count {
		s.count(scope, key, rec, EventReplayed, at)
	}
}

// flushTallies hands the gathered counts to the backend.
func (s *Store) flushTallies(ctx context.Context) error {
	return s.flushWith(ctx, s.call)
}

// flushWith is flushTallies making its backend calls through call.
func (s *Store) flushWith(ctx context.Context, call func(func() error) error) error {
	t := s.tallier
	if t == nil {
		return nil
	}
	s.counts.flushing.Lock()
	defer s.counts.flushing.Unlock()
	// The drops noted from here on fall in the next flush's period.
	dropped := s.ledger.dropped.Swap(false)
	take := s.now()
	batch := s.takeTallies()
	var err error
	if len(batch) > 0 {
		err = call(func() error { return t.AddTallies(ctx, batch) })
	}
	s.flushed(ctx, call, take, dropped, len(batch) > 0, err)
	return err
}

// tallyLoop flushes counts every Options.CountInterval until the store
// stops, or less often when flushing takes long: a flush costs in
// proportion to the records counted since the last, so with replays spread
// over many keys the next flush waits flushSpacing times as long as this
// one took, which bounds flushing to a small share of the machine however
// many keys are replayed. It keeps wall-clock time: the cadence of a flush
// decides nothing, and tests with a fake clock get their counts from
// Sweep.
func (s *Store) tallyLoop() {
	defer close(s.tallyDone)
	timer := time.NewTimer(s.o.CountInterval)
	defer timer.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-timer.C:
		}
		start := time.Now()
		if err := s.flushTallies(context.Background()); err != nil {
			s.observeErr("tally", "", "", 0, err)
		}
		timer.Reset(max(s.o.CountInterval, flushSpacing*time.Since(start)))
	}
}
