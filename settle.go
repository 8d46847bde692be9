package idem

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemkit/idem/backend"
)

// settledPrefix starts the words a settled claim's story carries.
const settledPrefix = "settled: "

// inClearWords follow the verdict in the story of a result an operator
// settled in clear into an encrypted store.
const inClearWords = ", in clear"

// SettleOptions configure one Settle. Nil means the defaults.
type SettleOptions struct {
	// InClear says that the result of a committed verdict may be stored in
	// clear in an encrypted store when this Store has no keyring
	// (Options.Keys): without it, Settle refuses such a settle with a
	// *KeysNeededError. The story then reads "settled: committed, in
	// clear". A Store with a keyring seals the result whatever InClear
	// says. Default false.
	InClear bool
}

// Settle is an operator's verdict on a stale claim of (scope, key): one
// whose lease ended, whether recovery marked it as needing attention or
// has yet to resolve it. VerdictCommitted saves result as the key's result,
// replayed to every repeat; VerdictNotCommitted releases the claim, so the
// next request runs the effect. note says who decided and why; the
// record's story keeps it (the attempt's Reason, and Record.Recovered
// reads "settled: committed" or "settled: not committed").
//
// Settle goes through the backend's fenced calls with the claim's token,
// so it cannot overwrite a holder that took the claim meanwhile (then it
// fails with ErrFenced), and it refuses a live claim (ErrNothingToSettle
// with an *InProgressError). Settle reads idem's own scopes too. It drops
// the key from the replay cache.
//
// A committed verdict on an encrypted store (its marker record, or a
// sealed result, says so: docs/encryption.md) by a Store without a keyring
// is refused with a *KeysNeededError (ErrKeysNeeded), and nothing is
// written, unless o.InClear says the result may be stored in clear. A
// not-committed verdict saves no result and needs no key.
func (s *Store) Settle(ctx context.Context, scope, key string, v Verdict, result Result, note string, o *SettleOptions) error {
	if err := validate(scope, key, true); err != nil {
		return err
	}
	if v != VerdictCommitted && v != VerdictNotCommitted {
		return fmt.Errorf("idem: settle %q: verdict must be committed or not_committed, not %s", key, v)
	}
	if note == "" {
		return fmt.Errorf("idem: settle %q: a note saying who decided and why is required", key)
	}
	inClear := false
	if v == VerdictCommitted && s.o.Keys == nil {
		enc, because, err := s.encrypted(ctx)
		switch {
		case err != nil:
			return err
		case enc && (o == nil || !o.InClear):
			return &KeysNeededError{Scope: scope, Key: key, Because: because}
		}
		inClear = enc
	}
	rec, _, err := s.Inspect(ctx, scope, key)
	if errors.Is(err, ErrNotFound) {
		return fmt.Errorf("%w: key %q in scope %q has no record", ErrNothingToSettle, key, scope)
	}
	if err != nil {
		return err
	}
	now := s.now()
	switch {
	case rec.State != StateInProgress:
		return fmt.Errorf("%w: key %q in scope %q is %s", ErrNothingToSettle, key, scope, rec.State)
	case !rec.Stale(now):
		return errors.Join(ErrNothingToSettle,
			&InProgressError{Scope: scope, Key: key, LeaseEnds: rec.LeaseEnds})
	}
	retention := rec.Retention
	if retention <= 0 {
		retention = s.o.Retention
	}
	words := settledPrefix + v.String()
	if inClear {
		words += inClearWords
	}
	sealed, err := s.seal(ctx, scope, key, rec.Fingerprint, result)
	if err != nil {
		return err
	}
	s.hot.drop(scope, key, 0)
	err = s.call(func() error {
		if v == VerdictCommitted {
			return s.b.Complete(ctx, scope, key, rec.Token, backend.Completion{Result: sealed, At: now,
				ExpiresAt: expiresAt(now, retention), Recovered: words,
				Ending: backend.Ending{At: now, Outcome: words, Reason: note, Status: result.Status}})
		}
		return s.b.Release(ctx, scope, key, rec.Token, backend.Releasing{At: now, ExpiresAt: expiresAt(now, retention),
			Reason: words, Ending: backend.Ending{At: now, Outcome: outcomeReleased, Reason: words + ": " + note}})
	})
	if err != nil {
		s.fencedOrErr("settle", scope, key, rec.Token, err)
		return err
	}
	s.observe(Event{Kind: EventRecovered, Scope: scope, Key: key, Token: rec.Token, Time: now,
		Verdict: v.String(), Reason: settledPrefix + note})
	return nil
}
