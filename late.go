package idem

import (
	"context"
	"errors"
	"time"

	"github.com/idemkit/idem/backend"
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
	lc, ok := s.b.(backend.LateCompleter)
	if !ok {
		return unrecorded(nil)
	}
	now := s.now()
	sealed, err := s.seal(ctx, c.scope, c.key, c.fingerprint, saved)
	if err != nil {
		return unrecorded(err)
	}
	l := backend.LateCompletion{
		Completion:  completion(sealed, now, expiresAt(now, c.retention), ""),
		Fingerprint: c.fingerprint, Retention: c.retention, ClaimedAt: claimedAt, Owner: s.owner,
		Twice: backend.Ending{At: now, Outcome: outcomeRanTwice, Status: saved.Status},
	}
	l.Ending.Outcome = outcomeLate
	var out backend.LateOutcome
	err = s.call(func() (err error) {
		out, err = lc.CompleteLate(ctx, c.scope, c.key, c.token, l)
		return err
	})
	if err != nil {
		s.observeErr("complete late", c.scope, c.key, c.token, err)
		return unrecorded(err)
	}
	if out == backend.LateRanTwice {
		s.observe(Event{Kind: EventRanTwice, Scope: c.scope, Key: c.key, Token: c.token, Time: now,
			Reason: reasonRanTwice, Err: fnErr})
		return &RanTwiceError{Scope: c.scope, Key: c.key, Token: c.token, Err: errors.Join(endErr, fnErr)}
	}
	s.observe(Event{Kind: EventCompletedLate, Scope: c.scope, Key: c.key, Token: c.token, Time: now,
		Reason: reasonLate, Err: fnErr})
	return fnErr
}
