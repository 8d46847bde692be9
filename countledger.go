package idem

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/backend"
)

// The count ledger: what a Store knows about the counts it may have lost.
//
// Counts wait in memory for up to Options.CountInterval before they are
// written (counts.go), so a crash loses those of the last interval, and a
// full table of pending counts, or a failed write, drops some. None of it
// touches a result; it makes a count short. The ledger keeps the periods
// (gaps) in which that may have happened, so that a count is reported as
// exact only when no gap touches its record's life (CountsApproximate).
//
// It lives in the backend (backend.CountLedger, implemented by the
// embedded store, which one process opens at a time) as a small JSON
// document: whether a Store has it open, and since when counts may be in
// that Store's memory only (Since, moved on by every flush that wrote
// what it took), and the gaps. A Store opening a ledger still marked open
// learns that its predecessor died with counts in memory: it adds the gap
// from that Since to now. Ledger writes are one small entry per flush that
// wrote counts, never one per replay.

// ledgerSlack widens every gap backwards: a replay reads the clock before
// it is counted (with the system clock, a reading up to coarseSlack old),
// so a count taken by a flush after it may carry a slightly earlier time.
const ledgerSlack = time.Second

// maxGaps bounds the gaps kept; past it the two oldest merge into one
// that covers both (and what lies between: more records read as
// approximate, never fewer).
const maxGaps = 32

// countGap is a period of store time in which counts may have been lost.
type countGap struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
}

// ledgerState is the ledger as stored.
type ledgerState struct {
	// Open is set while a Store holds counts in memory that it has not
	// written; Since is the earliest time such a count may carry.
	Open  bool       `json:"open"`
	Since time.Time  `json:"since"`
	Gaps  []countGap `json:"gaps,omitempty"`
}

// countLedger is a Store's copy of its ledger.
type countLedger struct {
	keeper backend.CountLedger // nil: no ledger, every count is a lower bound
	// dropped is set when a count was dropped, the table of pending counts
	// being full; the next flush turns it into a gap.
	dropped atomic.Bool
	mu      sync.Mutex // guards the fields below
	state   ledgerState
	saved   time.Time // the Since last saved
}

// openLedger loads the backend's ledger, turns what a Store that did not
// close left open into a gap, and marks the ledger open for this Store.
func (s *Store) openLedger(ctx context.Context) {
	k, ok := s.b.(backend.CountLedger)
	if !ok || s.tallier == nil {
		return
	}
	l := &s.ledger
	l.keeper = k
	now := s.now()
	var raw []byte
	err := s.call(func() (err error) { raw, err = k.LoadCountLedger(ctx); return err })
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err != nil:
		// Nothing is known of the past: every count so far may be short.
		s.observeErr("count ledger", "", "", 0, err)
		l.state.addGap(countGap{To: now}, 0)
	case raw == nil:
		// No ledger: a new store (nothing before now), or one a release
		// that kept none wrote, which may have lost counts unmarked: the
		// records first seen before now read as approximate.
		l.state.addGap(countGap{To: now.Add(-time.Nanosecond)}, 0)
	default:
		if err := json.Unmarshal(raw, &l.state); err != nil {
			s.observeErr("count ledger", "", "", 0, err)
			l.state = ledgerState{}
			l.state.addGap(countGap{To: now}, 0)
		}
	}
	if l.state.Open {
		l.state.addGap(countGap{From: l.state.Since.Add(-ledgerSlack), To: now}, s.o.CountInterval)
	}
	l.state.Open, l.state.Since = true, now
	s.saveLedger(ctx, s.call)
}

// saveLedger writes the ledger through call (Store.call, or a direct call
// once Close has drained the others). Called with l.mu held. A failure is
// reported; the ledger stored stays as it was, which only ever widens the
// gap a crash leaves (an older Since).
func (s *Store) saveLedger(ctx context.Context, call func(func() error) error) {
	l := &s.ledger
	raw, err := json.Marshal(&l.state)
	if err == nil {
		err = call(func() error { return l.keeper.SaveCountLedger(ctx, raw) })
	}
	if err != nil {
		s.observeErr("count ledger", "", "", 0, err)
		return
	}
	l.saved = l.state.Since
}

// flushed records a flush of the counts taken at take (batch says whether
// it held any): a failed write, or counts dropped since the last flush
// (dropped, read before take), leave a gap; the counts still in memory
// now date from take on.
func (s *Store) flushed(ctx context.Context, call func(func() error) error, take time.Time, dropped, batch bool,
	err error) {
	l := &s.ledger
	if l.keeper == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	gap := err != nil || dropped
	if gap {
		l.state.addGap(countGap{From: l.state.Since.Add(-ledgerSlack), To: take}, s.o.CountInterval)
	}
	l.state.Since = take
	// An idle flush saves only now and then: a crash after it widens the
	// gap back to the last save, over a period with nothing counted.
	if batch || gap || take.Sub(l.saved) > 6*s.o.CountInterval {
		s.saveLedger(ctx, call)
	}
}

// closeLedger marks the ledger closed, after Close's last flush (with no
// call left that could count): the next Store opens it with no new gap.
func (s *Store) closeLedger(ctx context.Context, call func(func() error) error) {
	l := &s.ledger
	if l.keeper == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.state.Open = false
	s.saveLedger(ctx, call)
}

// addGap adds g, merging it into the latest gap when they overlap or lie
// within join of each other, and merging the two oldest past maxGaps.
func (st *ledgerState) addGap(g countGap, join time.Duration) {
	if n := len(st.Gaps); n > 0 {
		last := &st.Gaps[n-1]
		if !g.From.After(last.To.Add(join)) {
			if g.From.Before(last.From) {
				last.From = g.From
			}
			if g.To.After(last.To) {
				last.To = g.To
			}
			return
		}
	}
	st.Gaps = append(st.Gaps, g)
	if len(st.Gaps) > maxGaps {
		st.Gaps[1].From = st.Gaps[0].From
		st.Gaps = append(st.Gaps[:0], st.Gaps[1:]...)
	}
}

// CountsApproximate reports whether rec's counts of replays and rejections
// (Record.Replays, Conflicts, Mismatches), as read from this Store, are a
// lower bound rather than exact: the Store may have lost counts during
// the record's life (a crash with counts not yet written, a table of
// pending counts found full, a failed write), or its backend keeps no
// ledger of such losses (backend.CountLedger; only the embedded store
// keeps one), or no counts at all. False means the counts are exact as of
// the last flush: replays answered since then, at most
// Options.CountInterval ago, are in memory and not yet in the record.
// docs/contract.md ("Counts") states the rule.
func (s *Store) CountsApproximate(rec *Record) bool {
	l := &s.ledger
	if s.tallier == nil || l.keeper == nil {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, g := range l.state.Gaps {
		// The record's counts are those of replays and rejections from its
		// first claim to its expiry.
		if !rec.FirstSeen.After(g.To) && (rec.ExpiresAt.IsZero() || !rec.ExpiresAt.Before(g.From)) {
			return true
		}
	}
	return false
}
