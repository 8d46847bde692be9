package redisstore

import (
	"context"
	"time"

	"github.com/idemkit/idem/backend"
)

// CompleteLate implements backend.LateCompleter: it reads the record,
// decides, and writes with putScript over the version it read, deciding
// again if the record changed meanwhile.
func (b *Backend) CompleteLate(ctx context.Context, scope, key string, token uint64, l backend.LateCompletion) (backend.LateOutcome, error) {
	if err := b.check(ctx); err != nil {
		return 0, err
	}
	k := b.keysOf(scope, key)
	for {
		s, err := b.read(ctx, k, recordFields)
		if err != nil {
			return 0, backend.Unavailable("complete late", err)
		}
		rec := s.rec
		out := backend.LateRecorded
		ttlFrom := l.At
		switch {
		case rec == nil:
			rec = &backend.Record{Scope: scope, Key: key, Token: token, Retention: l.Retention,
				FirstSeen: l.ClaimedAt, ClaimedAt: l.ClaimedAt, Claims: 1}
			lateDone(rec, l, token)
		case rec.State == backend.StateReleased || (rec.State == backend.StateInProgress && rec.Token == token):
			lateDone(rec, l, token)
		case rec.State == backend.StateDone && rec.Token == token:
			return backend.LateRecorded, nil
		default:
			out = backend.LateRanTwice
			rec.MayHaveRunTwice = true
			rec.Attempts = l.Story(rec.Attempts, token, true)
			ttlFrom = time.Time{} // the key keeps its TTL, or an open claim none
		}
		res, _, err := b.put(ctx, k, s.ver, s.counted, 0, rec, ttlFrom)
		if err != nil {
			return 0, backend.Unavailable("complete late", err)
		}
		if res == putWritten {
			return out, nil
		}
		if err := b.check(ctx); err != nil {
			return 0, err
		}
	}
}

// lateDone makes rec done with l's result, as LateCompleter says.
func lateDone(rec *backend.Record, l backend.LateCompletion, token uint64) {
	rec.State, rec.Result, rec.Fingerprint = backend.StateDone, l.Result.Clone(), l.Fingerprint
	rec.DoneAt, rec.ExpiresAt, rec.Recovered = l.At, l.ExpiresAt, l.Recovered
	rec.Checks, rec.NextCheck, rec.Attention, rec.Owner = 0, time.Time{}, false, ""
	rec.Attempts = l.Story(rec.Attempts, token, false)
}
