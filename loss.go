package idem

import (
	"context"
	"time"

	"github.com/idemkit/idem/backend"
)

// openLossWindow opens the backend's loss window if an open accepted a
// loss (badgerstore.Options.AcceptLoss), for the Retention. A failure to
// record it durably is reported; the window covers this process anyway,
// and the next open opens it again.
func (s *Store) openLossWindow() {
	lk, ok := s.b.(backend.LossKeeper)
	if !ok {
		return
	}
	if err := lk.OpenLossWindow(s.now(), s.o.Retention); err != nil {
		s.observeErr("loss window", "", "", 0, err)
	}
}

// lostMaybe reports whether rec, a claim just won, is of a key whose
// latest write a loss may have taken (the backend notes it
// in the claim's attempt).
func lostMaybe(rec *Record) bool {
	return len(rec.Attempts) > 0 && rec.Attempts[len(rec.Attempts)-1].Reason == backend.LossNote
}

// askLost asks the Resolver about rec, a claim on a key absent (or
// released or expired before the loss) during a loss window, before its
// effect may run: the key's latest write may be one the loss took, and its
// effect may have happened. It returns the result
// to replay (committed: saved as the key's result), nil and nil when the
// claim goes on (not committed), or an error, the claim then held for
// recovery (unknown, or no Resolver) as an orphaned claim is. Scopes with a
// recovery rule (the Journal's) go on: the rule would release the claim.
func (s *Store) askLost(ctx context.Context, rec *Record) (*Result, error) {
	if _, ok := s.rules[rec.Scope]; ok {
		return nil, nil
	}
	s.observe(Event{Kind: EventStale, Scope: rec.Scope, Key: rec.Key, Token: rec.Token, Reason: backend.LossNote})
	res := Resolution{Verdict: VerdictUnknown}
	if s.o.Resolver != nil {
		var err error
		if res, err = s.o.Resolver.Resolve(ctx, rec.Clone()); err != nil {
			s.observeErr("resolve", rec.Scope, rec.Key, rec.Token, err)
			res = Resolution{Verdict: VerdictUnknown}
		}
	}
	// The claim is this request's: it is ended whatever the caller does.
	ctx = context.WithoutCancel(ctx)
	now := s.now()
	switch res.Verdict {
	case VerdictCommitted:
		return s.settleLost(ctx, rec, res.Result, now)
	case VerdictNotCommitted:
		s.observe(Event{Kind: EventRecovered, Scope: rec.Scope, Key: rec.Key, Token: rec.Token, Time: now,
			Verdict: VerdictNotCommitted.String(), Reason: backend.LossNote})
		return nil, s.renewLost(ctx, rec, now)
	}
	return nil, s.holdLost(ctx, rec, now)
}

// settleLost saves result as the key's result, as recovery does for a
// committed verdict, and returns it to replay.
func (s *Store) settleLost(ctx context.Context, rec *Record, result Result, now time.Time) (*Result, error) {
	retention := rec.Retention
	if retention <= 0 {
		retention = s.o.Retention
	}
	sealed, err := s.seal(ctx, rec.Scope, rec.Key, rec.Fingerprint, result)
	if err != nil {
		return nil, err
	}
	comp := completion(sealed, now, expiresAt(now, retention), VerdictCommitted.String())
	comp.Ending.Reason = backend.LossNote
	if err := s.call(func() error { return s.b.Complete(ctx, rec.Scope, rec.Key, rec.Token, comp) }); err != nil {
		// The claim stays in progress: recovery asks again once its lease ends.
		s.fencedOrErr("recover", rec.Scope, rec.Key, rec.Token, err)
		return nil, err
	}
	saved := result.Clone()
	if len(result.Body) <= hotMaxBody {
		s.keep(rec.Scope, rec.Key, hotRecord{Fingerprint: rec.Fingerprint, Token: rec.Token,
			ExpiresAt: comp.ExpiresAt, Result: saved})
	}
	s.observe(Event{Kind: EventRecovered, Scope: rec.Scope, Key: rec.Key, Token: rec.Token, Time: now,
		Verdict: VerdictCommitted.String(), Reason: backend.LossNote})
	return saved, nil
}

// renewLost gives the claim a full lease again when the Resolver's answer
// took a third of it, as Do's heartbeat would have.
func (s *Store) renewLost(ctx context.Context, rec *Record, now time.Time) error {
	lease := rec.LeaseEnds.Sub(rec.ClaimedAt)
	if rec.LeaseEnds.Sub(now) > lease*2/3 {
		return nil
	}
	ends := now.Add(lease)
	if err := s.call(func() error { return s.b.Extend(ctx, rec.Scope, rec.Key, rec.Token, ends) }); err != nil {
		s.fencedOrErr("extend", rec.Scope, rec.Key, rec.Token, err)
		return err
	}
	rec.LeaseEnds = ends
	return nil
}

// holdLost ends the claim's lease, leaving it for recovery, and records
// the inconclusive answer as recovery does; with no Resolver it is left as
// an orphaned claim is.
func (s *Store) holdLost(ctx context.Context, rec *Record, now time.Time) error {
	if err := s.call(func() error { return s.b.Extend(ctx, rec.Scope, rec.Key, rec.Token, now) }); err != nil {
		s.fencedOrErr("held", rec.Scope, rec.Key, rec.Token, err)
		return err
	}
	rec.LeaseEnds = now
	s.observe(Event{Kind: EventHeld, Scope: rec.Scope, Key: rec.Key, Token: rec.Token, Time: now, Reason: backend.LossNote})
	unknown := &OutcomeUnknownError{Scope: rec.Scope, Key: rec.Key}
	if s.o.Resolver == nil {
		s.observe(Event{Kind: EventStale, Scope: rec.Scope, Key: rec.Key, Token: rec.Token, Time: now,
			Reason: "no resolver configured"})
		return unknown
	}
	if _, err := s.deferCheck(ctx, rec, now); err != nil {
		return err
	}
	// Fenced: recovery took the claim first; its outcome is not known here.
	return unknown
}
