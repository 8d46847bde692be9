package idem

import (
	"context"
	"time"

	"github.com/idemkit/idem/backend"
)

// Retention, expiry and reclamation.
//
// A done record replays until its ExpiresAt, fixed when it completes as the
// store's time plus the record's retention (Options.Retention or the
// request's override). Expiry is decided only by the store's clock: a
// request that meets an expired record claims the key as if nothing were
// stored (Backend.Claim compares ExpiresAt with the store's Now). Deleting
// what expired is separate and lazy: Sweep reclaims it in bounded batches
// in the background, so reclamation never stalls a request, and the Badger
// backend also gives each record a TTL an hour past its expiry, so that
// compaction drops whatever the sweep has not reached.

// reclaimBatch bounds one Reclaim call; reclaimBatches bounds one sweep.
const (
	reclaimBatch   = 512
	reclaimBatches = 64
)

// reclaimExpired deletes expired records in bounded batches, reporting each.
func (s *Store) reclaimExpired(ctx context.Context) (int, error) {
	total := 0
	for range reclaimBatches {
		now := s.now()
		var refs []backend.Ref
		err := s.call(func() (err error) {
			refs, err = s.b.Reclaim(ctx, now, reclaimBatch)
			return err
		})
		for _, r := range refs {
			// The cache would not serve an expired record; this frees it.
			s.hot.drop(r.Scope, r.Key, r.Token)
			s.observe(Event{Kind: EventExpired, Scope: r.Scope, Key: r.Key, Token: r.Token, Time: now})
		}
		total += len(refs)
		if err != nil || len(refs) < reclaimBatch {
			return total, err
		}
	}
	return total, nil
}

// expiresAt returns when a record completed at now with retention expires.
func expiresAt(now time.Time, retention time.Duration) time.Time { return now.Add(retention) }
