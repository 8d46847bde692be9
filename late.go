package idem

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Late completions: a holder paused past its lease (a GC pause, a stopped
// VM, a partition) finishes its effect after recovery took its claim, so
// its Complete is fenced. The effect happened; Do then records what it can
// instead of dropping it:
//
//   - the record is released (recovery decided "not committed") or absent
//     (expired and reclaimed): nobody else ran the effect since, so the
//     late result is recorded, atomically and only while the record is
//     still so, and the next request replays it;
//   - another holder claimed the key since: the effect may have run twice.
//     The newer holder's outcome stands, the record is marked
//     (Record.MayHaveRunTwice) and its story gets the late attempt.
//
// Backends do it through LateCompleter; without it Do returns a
// *LateCompletionError as before.
//
// A result recorded late is returned as a completion's is, with fn's own
// error and no error class of its own: the effect ran once, its result is
// durable before the caller is answered (the design's durability rule),
// and every repeat replays it, so the caller has nothing to do
// differently (EventCompletedLate tells the operator). A double run is
// the caller's business: the answer it holds is not the recorded one.

// LateCompleter is implemented by backends that can record a late
// completion: the outcome of a claim whose Complete was fenced because
// recovery had ended it. Both steps are atomic with the check of the
// record's state (a compare-and-set): a record that changes meanwhile is
// judged as it is when written.
type LateCompleter interface {
	// CompleteLate decides on the record of (scope, key) as it is now:
	//
	//   - not stored, released, or still in progress with token: it
	//     becomes done with l.Result, l.Fingerprint, l.At as DoneAt and
	//     l.ExpiresAt, as Complete would make it (a record that was not
	//     stored starts a new life: token, Claims 1, FirstSeen and
	//     ClaimedAt l.ClaimedAt, l.Retention); its story is l.Story(...,
	//     false). It returns LateRecorded;
	//   - done with token: nothing changes; LateRecorded;
	//   - in progress or done with another token (expired or not): only
	//     MayHaveRunTwice is set and the story becomes l.Story(..., true);
	//     the state, result, lease and counts stay. It returns LateRanTwice.
	//
	// A record marked MayHaveRunTwice keeps the mark through the rest of
	// its life: Complete, Release, Defer and a new claim of a released
	// record keep it; only a new life (an expired record claimed again)
	// starts without it.
	CompleteLate(ctx context.Context, scope, key string, token uint64, l LateCompletion) (LateOutcome, error)
}

// LateOutcome is what CompleteLate did.
type LateOutcome uint8

// The outcomes of CompleteLate.
const (
	// LateRecorded: the late result is the record's result (or already was).
	LateRecorded LateOutcome = iota + 1
	// LateRanTwice: another holder had claimed the key; the record is
	// marked MayHaveRunTwice.
	LateRanTwice
)

// LateCompletion describes a late completion: the completion the fenced
// Complete carried, with what a backend needs to build the record anew
// or to add the attempt to its story.
type LateCompletion struct {
	// Completion is the fenced one; its Ending is the late attempt's end
	// when the result is recorded.
	Completion
	// Fingerprint, Retention, ClaimedAt and Owner are the late claim's.
	Fingerprint string
	Retention   time.Duration
	ClaimedAt   time.Time
	Owner       string
	// Twice is the late attempt's end when the key was claimed again.
	Twice Ending
}

// Story returns attempts (not changed) with the late attempt ended: the
// attempt with token takes the Ending (Twice if twice) as Record.Attempts
// documents for an Ending; if the story no longer holds it, it is added in
// token order, and the story kept to MaxAttempts (the first and latest).
func (l LateCompletion) Story(attempts []Attempt, token uint64, twice bool) []Attempt {
	e := l.Ending
	if twice {
		e = l.Twice
	}
	out := slices.Clone(attempts)
	for i := range out {
		if a := &out[i]; a.Token == token {
			a.EndedAt, a.Outcome, a.Status = e.At, e.Outcome, e.Status
			if e.Reason != "" {
				a.Reason = e.Reason
			}
			return out
		}
	}
	i, _ := slices.BinarySearchFunc(out, token, func(a Attempt, t uint64) int {
		switch {
		case a.Token < t:
			return -1
		case a.Token > t:
			return 1
		}
		return 0
	})
	out = slices.Insert(out, i, Attempt{Token: token, ClaimedAt: l.ClaimedAt, Owner: l.Owner,
		EndedAt: e.At, Outcome: e.Outcome, Reason: e.Reason, Status: e.Status})
	if n := len(out); n > MaxAttempts {
		out = append(out[:1], out[n-MaxAttempts+1:]...)
	}
	return out
}

// The words of a late attempt's story (see record.go). Its Ending has no
// reason, so the attempt keeps the one recovery gave it ("recovered: not
// committed"); the reasons here are the Observer's.
const (
	outcomeLate     = "completed late"
	reasonLate      = "its claim had been recovered; no one claimed the key since"
	outcomeRanTwice = "completed late: may have run twice"
	reasonRanTwice  = "its claim had been recovered and the key claimed again before its result was saved"
)

// completeLate records a late completion for Do: c's Complete of saved
// was fenced (endErr), after fn ran (fnErr is its own error). It returns
// the error Do returns: fnErr when the result was recorded late (the
// effect ran once and is recorded, as when Complete succeeds), a
// *RanTwiceError when another holder had claimed the key, and a
// *LateCompletionError when nothing could be recorded (the backend is no
// LateCompleter, or the write failed).
func (s *Store) completeLate(ctx context.Context, c *Claim, claimedAt time.Time, saved Result, fnErr, endErr error) error {
	unrecorded := func(more error) error {
		return &LateCompletionError{Scope: c.scope, Key: c.key, Token: c.token, Err: errors.Join(endErr, more, fnErr)}
	}
	lc, ok := s.b.(LateCompleter)
	if !ok {
		return unrecorded(nil)
	}
	now := s.now()
	l := LateCompletion{
		Completion:  completion(saved, now, expiresAt(now, c.retention), ""),
		Fingerprint: c.fingerprint, Retention: c.retention, ClaimedAt: claimedAt, Owner: s.owner,
		Twice: Ending{At: now, Outcome: outcomeRanTwice, Status: saved.Status},
	}
	l.Ending.Outcome = outcomeLate
	var out LateOutcome
	err := s.call(func() (err error) {
		out, err = lc.CompleteLate(ctx, c.scope, c.key, c.token, l)
		return err
	})
	if err != nil {
		s.observeErr("complete late", c.scope, c.key, c.token, err)
		return unrecorded(err)
	}
	if out == LateRanTwice {
		s.observe(Event{Kind: EventRanTwice, Scope: c.scope, Key: c.key, Token: c.token, Time: now,
			Reason: reasonRanTwice, Err: fnErr})
		return &RanTwiceError{Scope: c.scope, Key: c.key, Token: c.token, Err: errors.Join(endErr, fnErr)}
	}
	s.observe(Event{Kind: EventCompletedLate, Scope: c.scope, Key: c.key, Token: c.token, Time: now,
		Reason: reasonLate, Err: fnErr})
	return fnErr
}

// LateCompletionError is what Do returns, beside fn's result, when the
// effect ran and its outcome was to be saved, but its claim had been
// recovered first (Complete was fenced: its holder was paused, or cut off
// from the storage, past the lease and the grace), and the late outcome
// could not be recorded either: the backend is no LateCompleter, or
// recording it failed on storage. The effect happened; the record does
// not hold its result, so the key may be run again, or may already have
// been, by another holder: treat the outcome as unrecorded, and do not
// report success to a client that will retry. It matches
// ErrOutcomeNotRecorded, and ErrFenced.
type LateCompletionError struct {
	Scope, Key string
	// Token is the late holder's token.
	Token uint64
	// Err holds the fenced completion's error, the late write's error if
	// any, and fn's own error, if any.
	Err error
}

func (e *LateCompletionError) Error() string {
	return fmt.Sprintf("idem: effect for key %q in scope %q ran, but its claim (token %d) was recovered before its result was saved",
		e.Key, e.Scope, e.Token)
}

// Unwrap returns Err.
func (e *LateCompletionError) Unwrap() error { return e.Err }

// Is reports whether target is ErrOutcomeNotRecorded: the effect ran and
// its outcome is not recorded. (ErrFenced matches through Err.)
func (e *LateCompletionError) Is(target error) bool { return target == ErrOutcomeNotRecorded }

// RanTwiceError is what Do returns, beside fn's result, when the effect
// ran but its claim had been recovered and the key claimed again by
// another holder before its result was saved: the effect may have run
// twice. The newer holder's outcome is the record's (its result is what a
// repeat gets), this one is not recorded, and the record is marked
// MayHaveRunTwice, with this attempt in its story. It matches ErrRanTwice
// and ErrOutcomeNotRecorded, and ErrFenced through Err.
type RanTwiceError struct {
	Scope, Key string
	// Token is the late holder's token.
	Token uint64
	// Err holds the fenced completion's error and fn's own error, if any.
	Err error
}

func (e *RanTwiceError) Error() string {
	return fmt.Sprintf("idem: effect for key %q in scope %q may have run twice: its claim (token %d) was recovered and the key claimed again before its result was saved",
		e.Key, e.Scope, e.Token)
}

// Unwrap returns Err.
func (e *RanTwiceError) Unwrap() error { return e.Err }

// Is reports whether target is ErrRanTwice or ErrOutcomeNotRecorded.
func (e *RanTwiceError) Is(target error) bool {
	return target == ErrRanTwice || target == ErrOutcomeNotRecorded
}
