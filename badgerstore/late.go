package badgerstore

import (
	"context"
	"time"

	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/internal/engine"
)

var _ backend.LateCompleter = (*Backend)(nil)

// CompleteLate implements LateCompleter, in one op of the engine: the
// record is read and written in the committer's unit, so nothing changes
// it in between.
func (b *Backend) CompleteLate(ctx context.Context, scope, key string, token uint64, l backend.LateCompletion) (backend.LateOutcome, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	id := recordID(scope, key)
	var out backend.LateOutcome
	err := b.update(func(t *engine.Txn) error {
		rec, _, err := b.readRecord(t, id)
		if err != nil {
			return err
		}
		switch {
		case rec == nil:
			out = backend.LateRecorded
			n := &backend.Record{Scope: scope, Key: key, Token: token, Retention: l.Retention,
				FirstSeen: l.ClaimedAt, ClaimedAt: l.ClaimedAt, Claims: 1}
			lateDone(n, l, token)
			ended(t, id, l.At, l.ExpiresAt)
			return b.put(t, id, n, l.At)
		case rec.State == backend.StateReleased || (rec.State == backend.StateInProgress && rec.Token == token):
			out = backend.LateRecorded
			if !rec.ExpiresAt.IsZero() {
				t.Delete(expiryKey(rec.ExpiresAt, id))
			}
			lateDone(rec, l, token)
			ended(t, id, l.At, l.ExpiresAt)
			return b.put(t, id, rec, l.At)
		case rec.State == backend.StateDone && rec.Token == token:
			out = backend.LateRecorded
			return engine.ErrNoWrite
		default:
			out = backend.LateRanTwice
			rec.MayHaveRunTwice = true
			rec.Attempts = l.Story(rec.Attempts, token, true)
			var ttlFrom time.Time // an open claim has no TTL
			if rec.State != backend.StateInProgress {
				ttlFrom = l.At
			}
			return b.put(t, id, rec, ttlFrom)
		}
	})
	return out, backend.Unavailable("complete late", err)
}

// lateDone makes rec done with l's result, as LateCompleter says.
func lateDone(rec *backend.Record, l backend.LateCompletion, token uint64) {
	rec.State, rec.Result, rec.Fingerprint = backend.StateDone, l.Result.Clone(), l.Fingerprint
	rec.DoneAt, rec.ExpiresAt, rec.Recovered = l.At, l.ExpiresAt, l.Recovered
	rec.Checks, rec.NextCheck, rec.Attention, rec.Owner = 0, time.Time{}, false, ""
	rec.Attempts = l.Story(rec.Attempts, token, false)
}
