package idem

import (
	"context"
	"errors"
	"time"

	"github.com/idemkit/idem/backend"
)

// Verdict is a Resolver's answer about a stale claim's effect.
type Verdict uint8

const (
	// VerdictUnknown: the downstream cannot tell yet. The claim stays in progress;
	// recovery asks again after a back-off, and after Options.MaxUnknown
	// answers marks it as needing attention.
	VerdictUnknown Verdict = iota
	// VerdictCommitted: the effect happened. Resolution.Result is saved as the
	// key's result and replayed to every repeat.
	VerdictCommitted
	// VerdictNotCommitted: the effect did not happen. The claim is released and
	// the next request runs it.
	VerdictNotCommitted
)

// String returns "unknown", "committed" or "not_committed".
func (v Verdict) String() string {
	switch v {
	case VerdictCommitted:
		return "committed"
	case VerdictNotCommitted:
		return "not_committed"
	default:
		return "unknown"
	}
}

// Resolution is a Resolver's answer.
type Resolution struct {
	Verdict Verdict
	// Result is the downstream result to save when Verdict is VerdictCommitted.
	Result Result
}

// Resolver is the caller's downstream check: given a stale claim, it says
// whether the claim's effect happened, usually by asking the downstream
// system with the same key (a payment provider's idempotency key, a ledger
// row). It must be safe for concurrent use; an error counts as VerdictUnknown.
// A Store asks it about one claim once at a time: requests that meet the
// claim meanwhile wait for that answer.
type Resolver interface {
	Resolve(ctx context.Context, rec *Record) (Resolution, error)
}

// ResolverFunc adapts a function to Resolver.
type ResolverFunc func(ctx context.Context, rec *Record) (Resolution, error)

// Resolve calls f.
func (f ResolverFunc) Resolve(ctx context.Context, rec *Record) (Resolution, error) {
	return f(ctx, rec)
}

// recoveryRule settles every stale claim of one scope in place of the
// Resolver, for scopes whose claims the Store itself can judge (the
// Journal's, see journalRule). Store.rules holds them by scope.
type recoveryRule struct {
	// verdict is the rule's answer for every stale claim of the scope
	// (VerdictNotCommitted: the only one rules give so far).
	verdict Verdict
	// why is the answer's reason, for the Observer; the record's story
	// reads "recovered: " + why.
	why string
	// keep is how long the released record is kept for its story.
	keep time.Duration
}

// resolveStale resolves one stale claim. It returns the verdict it applied, or
// VerdictUnknown with a nil error when someone else changed the record first; in
// both cases the caller reads the record again. It returns an
// *OutcomeUnknownError when the claim stays unresolved.
func (s *Store) resolveStale(ctx context.Context, rec *Record, now time.Time) (Verdict, error) {
	if rec.Attention {
		return VerdictUnknown, &OutcomeUnknownError{Scope: rec.Scope, Key: rec.Key, Checks: rec.Checks,
			Attention: rec.Attention, NextCheck: rec.NextCheck}
	}
	if rule, ok := s.rules[rec.Scope]; ok {
		return s.applyRule(ctx, rule, rec, now)
	}
	if t, ok := s.b.(backend.Transactor); ok && t.Transactional(rec) {
		// The effect's writes commit only with the completion, fenced by
		// this token: the record is in progress, so they did not commit,
		// and after the release they never can.
		keep := rec.Retention
		if keep <= 0 {
			keep = s.o.Retention
		}
		return s.applyRule(ctx, recoveryRule{verdict: VerdictNotCommitted, why: "transactional effect not committed", keep: keep}, rec, now)
	}
	if until := s.graceEnds(rec); now.Before(until) {
		// Its holder may only be paused: wait before asking the Resolver.
		return VerdictUnknown, &OutcomeUnknownError{Scope: rec.Scope, Key: rec.Key, Checks: rec.Checks,
			Attention: rec.Attention, NextCheck: until}
	}
	if s.o.Resolver == nil {
		s.observe(Event{Kind: EventStale, Scope: rec.Scope, Key: rec.Key, Token: rec.Token, Time: now,
			Reason: "no resolver configured"})
	}
	if s.o.Resolver == nil || now.Before(rec.NextCheck) {
		return VerdictUnknown, &OutcomeUnknownError{Scope: rec.Scope, Key: rec.Key, Checks: rec.Checks,
			Attention: rec.Attention, NextCheck: rec.NextCheck}
	}
	f, lead := s.flights.join(rec)
	if !lead {
		return s.flights.wait(ctx, f)
	}
	v, err := s.resolveOnce(ctx, rec, now)
	s.flights.land(rec, f, v, err)
	return v, err
}

// resolveOnce asks the Resolver about rec, the leader of its flight, and
// applies the verdict. It first reads the record again: a resolution that
// ended just before this one began has changed it, and the Resolver is
// asked only about a claim still stale and due.
func (s *Store) resolveOnce(ctx context.Context, rec *Record, now time.Time) (Verdict, error) {
	var cur *Record
	err := s.call(func() (err error) {
		cur, err = s.b.Get(ctx, rec.Scope, rec.Key)
		return err
	})
	switch {
	case errors.Is(err, ErrNotFound):
		return VerdictUnknown, nil
	case err != nil:
		return VerdictUnknown, err
	case cur.Token != rec.Token || cur.State != StateInProgress || !cur.Stale(now) || cur.Attention ||
		now.Before(cur.NextCheck) || cur.Checks != rec.Checks:
		return VerdictUnknown, nil
	}
	s.observe(Event{Kind: EventStale, Scope: rec.Scope, Key: rec.Key, Token: rec.Token, Time: now})
	res, err := s.o.Resolver.Resolve(ctx, rec.Clone())
	if err != nil {
		if ctx.Err() != nil {
			return VerdictUnknown, ctx.Err()
		}
		s.observeErr("resolve", rec.Scope, rec.Key, rec.Token, err)
		res = Resolution{Verdict: VerdictUnknown}
	}
	retention := rec.Retention
	if retention <= 0 {
		retention = s.o.Retention
	}
	switch res.Verdict {
	case VerdictCommitted:
		var sealed Result
		sealed, err = s.seal(ctx, rec.Scope, rec.Key, rec.Fingerprint, res.Result)
		comp := completion(sealed, now, expiresAt(now, retention), VerdictCommitted.String())
		if why := s.heldNote(rec); why != "" {
			comp.Ending.Reason = why
		}
		if err == nil {
			err = s.call(func() error { return s.b.Complete(ctx, rec.Scope, rec.Key, rec.Token, comp) })
		}
		if err == nil && len(res.Result.Body) <= hotMaxBody {
			s.keep(rec.Scope, rec.Key, hotRecord{Fingerprint: rec.Fingerprint, Token: rec.Token,
				ExpiresAt: comp.ExpiresAt, Result: res.Result.Clone()})
		}
	case VerdictNotCommitted:
		why := "recovered: not committed"
		switch held := s.heldNote(rec); held {
		case "":
		case panicNote:
			why += " after a " + panicNote
		default:
			why += " (" + held + ")"
		}
		err = s.call(func() error {
			return s.b.Release(ctx, rec.Scope, rec.Key, rec.Token,
				releasing(now, expiresAt(now, retention), why))
		})
	default:
		return s.deferCheck(ctx, rec, now)
	}
	switch {
	case err == nil:
		s.observe(Event{Kind: EventRecovered, Scope: rec.Scope, Key: rec.Key, Token: rec.Token, Time: now,
			Verdict: res.Verdict.String()})
		return res.Verdict, nil
	case errors.Is(err, ErrFenced):
		// Someone else resolved or took over the claim first: read again.
		return VerdictUnknown, nil
	default:
		s.observeErr("recover", rec.Scope, rec.Key, rec.Token, err)
		return VerdictUnknown, err
	}
}

// graceEnds is when a stale claim may go to the Resolver: its lease's end
// plus RecoveryGrace when another live instance holds it, or when this
// instance held it for the Resolver (Options.RecoveryGrace); otherwise at
// once. An orphaned claim has no owner.
//
// A claim this instance held (the Policy's DecisionHold, Claim.Hold, a
// panic) ended on an outcome its effect did not know: typically a write
// whose answer never came, which a network path may still be holding. The
// process is not paused, but that write can still land, so its own sweep
// waits as long as another instance's would.
func (s *Store) graceEnds(rec *Record) time.Time {
	if rec.Owner == "" || s.o.RecoveryGrace <= 0 {
		return time.Time{}
	}
	if rec.Owner == s.owner && !s.heldHere(rec) {
		return time.Time{}
	}
	return rec.LeaseEnds.Add(s.o.RecoveryGrace)
}

// deferCheck records an inconclusive answer on the claim: the next check
// waits RecheckBackoff, doubled for every answer so far, and after
// MaxUnknown answers the claim needs attention.
func (s *Store) deferCheck(ctx context.Context, rec *Record, now time.Time) (Verdict, error) {
	checks := rec.Checks + 1
	backoff := s.o.RecheckBackoff << min(checks-1, 20)
	if backoff > maxRecheckBackoff || backoff <= 0 {
		backoff = maxRecheckBackoff
	}
	d := backend.Deferral{Checks: checks, NextCheck: now.Add(backoff), Attention: checks >= s.o.MaxUnknown}
	err := s.call(func() error { return s.b.Defer(ctx, rec.Scope, rec.Key, rec.Token, d) })
	switch {
	case err == nil:
		kind := EventUnknown
		if d.Attention {
			kind = EventAttention
		}
		s.observe(Event{Kind: kind, Scope: rec.Scope, Key: rec.Key, Token: rec.Token, Time: now,
			Verdict: VerdictUnknown.String()})
		return VerdictUnknown, &OutcomeUnknownError{Scope: rec.Scope, Key: rec.Key, Checks: d.Checks,
			Attention: d.Attention, NextCheck: d.NextCheck}
	case errors.Is(err, ErrFenced):
		return VerdictUnknown, nil
	default:
		s.observeErr("recover", rec.Scope, rec.Key, rec.Token, err)
		return VerdictUnknown, err
	}
}

// applyRule settles a stale claim as its scope's rule says, without the
// Resolver, whatever its NextCheck.
func (s *Store) applyRule(ctx context.Context, rule recoveryRule, rec *Record, now time.Time) (Verdict, error) {
	err := s.call(func() error {
		return s.b.Release(ctx, rec.Scope, rec.Key, rec.Token, releasing(now, now.Add(rule.keep), "recovered: "+rule.why))
	})
	if err != nil && !errors.Is(err, ErrFenced) {
		return VerdictUnknown, err
	}
	if err == nil {
		s.observe(Event{Kind: EventRecovered, Scope: rec.Scope, Key: rec.Key, Token: rec.Token, Time: now,
			Verdict: rule.verdict.String(), Reason: rule.why})
	}
	return rule.verdict, nil
}
