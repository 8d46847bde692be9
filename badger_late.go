package idem

import (
	"context"
	"time"

	"github.com/idemkit/idem/internal/engine"
)

var _ LateCompleter = (*BadgerBackend)(nil)

// CompleteLate implements LateCompleter, in one op of the engine: the
// record is read and written in the committer's unit, so nothing changes
// it in between.
func (b *BadgerBackend) CompleteLate(ctx context.Context, scope, key string, token uint64, l LateCompletion) (LateOutcome, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	id := recordID(scope, key)
	var out LateOutcome
	err := b.update(func(t *engine.Txn) error {
		rec, _, err := b.readRecord(t, id)
		if err != nil {
			return err
		}
		switch {
		case rec == nil:
			out = LateRecorded
			n := &Record{Scope: scope, Key: key, Token: token, Retention: l.Retention,
				FirstSeen: l.ClaimedAt, ClaimedAt: l.ClaimedAt, Claims: 1}
			lateDone(n, l, token)
			ended(t, id, l.At, l.ExpiresAt)
			return b.put(t, id, n, l.At)
		case rec.State == StateReleased || (rec.State == StateInProgress && rec.Token == token):
			out = LateRecorded
			if !rec.ExpiresAt.IsZero() {
				t.Delete(expiryKey(rec.ExpiresAt, id))
			}
			lateDone(rec, l, token)
			ended(t, id, l.At, l.ExpiresAt)
			return b.put(t, id, rec, l.At)
		case rec.State == StateDone && rec.Token == token:
			out = LateRecorded
			return engine.ErrNoWrite
		default:
			out = LateRanTwice
			rec.MayHaveRunTwice = true
			rec.Attempts = l.Story(rec.Attempts, token, true)
			var ttlFrom time.Time // an open claim has no TTL
			if rec.State != StateInProgress {
				ttlFrom = l.At
			}
			return b.put(t, id, rec, ttlFrom)
		}
	})
	return out, unavailable("complete late", err)
}

// lateDone makes rec done with l's result, as LateCompleter says.
func lateDone(rec *Record, l LateCompletion, token uint64) {
	rec.State, rec.Result, rec.Fingerprint = StateDone, l.Result.clone(), l.Fingerprint
	rec.DoneAt, rec.ExpiresAt, rec.Recovered = l.At, l.ExpiresAt, l.Recovered
	rec.Checks, rec.NextCheck, rec.Attention, rec.Owner = 0, time.Time{}, false, ""
	rec.Attempts = l.Story(rec.Attempts, token, false)
}
