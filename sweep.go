package idem

import (
	"context"
	"errors"
	"sync"

	"github.com/idemkit/idem/backend"
)

// The sweep: recovery of stale claims (crashrecovery.go) and reclamation
// of expired records (ttl.go), run in bounded batches, in the background
// every Options.SweepInterval or when a caller asks.

// sweepWorkers bounds the stale claims one Sweep resolves at once.
const sweepWorkers = 16

// SweepReport counts what one Sweep did.
type SweepReport struct {
	// Stale counts the stale claims examined.
	Stale int
	// Committed, NotCommitted and Unknown count the resolver's verdicts;
	// Attention counts claims marked as needing attention in this sweep.
	Committed, NotCommitted, Unknown, Attention int
	// Unresolved counts stale claims left as they were: no resolver, or
	// their next check is not due.
	Unresolved int
	// Expired counts the expired records reclaimed.
	Expired int
}

// Sweep writes the counts gathered in memory, then runs recovery and
// reclamation once: it resolves stale claims through the Resolver and
// deletes expired records, each in bounded batches. The background sweep
// does the same every Options.SweepInterval, but for the counts, which
// it leaves to their own interval (Options.CountInterval); tools and
// tests call it directly.
func (s *Store) Sweep(ctx context.Context) (SweepReport, error) {
	return s.sweep(ctx, true)
}

// sweep is Sweep; flush says whether to write the counts first.
func (s *Store) sweep(ctx context.Context, flush bool) (SweepReport, error) {
	var rep SweepReport
	if s.closed.Load() {
		return rep, ErrClosed
	}
	s.sweeps.Lock()
	defer s.sweeps.Unlock()
	if flush {
		if err := s.flushTallies(ctx); err != nil {
			return rep, err
		}
	}

	const batch = 256
	// A bounded number of batches keeps one sweep short even when a claim
	// keeps failing to resolve and comes back in every batch.
	for range 16 {
		now := s.now()
		var stale []*Record
		err := s.call(func() (err error) {
			stale, err = s.b.Stale(ctx, now, batch)
			return err
		})
		if err != nil {
			return rep, err
		}
		// Resolve the batch with a few workers: resolver calls are
		// downstream round trips, and the backend groups the concurrent
		// commits that end the claims into few syncs.
		verdicts := make([]Verdict, len(stale))
		errs := make([]error, len(stale))
		var wg sync.WaitGroup
		work := make(chan int)
		for range min(sweepWorkers, len(stale)) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range work {
					verdicts[i], errs[i] = s.resolveStale(ctx, stale[i], now)
				}
			}()
		}
		for i := range stale {
			work <- i
		}
		close(work)
		wg.Wait()
		changed := 0
		var firstErr error
		for i, rec := range stale {
			rep.Stale++
			v, err := verdicts[i], errs[i]
			var unk *OutcomeUnknownError
			switch {
			case err == nil:
				changed++
				switch v {
				case VerdictCommitted:
					rep.Committed++
				case VerdictNotCommitted:
					rep.NotCommitted++
				}
			case errors.As(err, &unk):
				if unk.Checks > rec.Checks {
					changed++
					rep.Unknown++
					if unk.Attention {
						rep.Attention++
					}
				} else {
					rep.Unresolved++
				}
			default:
				if firstErr == nil {
					firstErr = err
				}
			}
		}
		if firstErr != nil {
			return rep, firstErr
		}
		if len(stale) < batch || changed == 0 {
			break
		}
	}

	n, err := s.reclaimExpired(ctx)
	rep.Expired += n
	if err != nil {
		return rep, err
	}
	return rep, nil
}

// background runs Sweep, and the backend's own housekeeping, every
// Options.SweepInterval until the store stops.
func (s *Store) background() {
	defer close(s.bgDone)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		if _, err := s.sweep(ctx, false); err != nil && !errors.Is(err, ErrClosed) && ctx.Err() == nil {
			s.observeErr("sweep", "", "", 0, err)
		}
		// The backend's own housekeeping runs here, off the requests and off
		// the Sweep a caller times.
		if m, ok := s.b.(backend.Maintainer); ok {
			if err := s.call(func() error { return m.Maintain(ctx) }); err != nil &&
				!errors.Is(err, ErrClosed) && ctx.Err() == nil {
				s.observeErr("maintain", "", "", 0, err)
			}
		}
		select {
		case <-s.stop:
			return
		case <-s.o.Clock.After(s.o.SweepInterval):
		}
	}
}
