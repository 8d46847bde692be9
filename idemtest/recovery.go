package idemtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/stretchr/testify/require"
)

// The recovery rows: a stale claim resolved through the Resolver.

func testRecoveryCommitted(t *testing.T, nb source) {
	res := answer(idem.VerdictCommitted, okResult(`{"refund":"from-ledger"}`))
	e := newEnv(t, nb, withResolver(res))
	r := req("k", "fp")
	c := e.claim(r)
	e.clk.Advance(lease)
	got := e.replay(r)
	require.Equal(t, `{"refund":"from-ledger"}`, string(got.Body))
	require.Equal(t, 1, res.n())
	require.Equal(t, c.Token(), res.seen[0].Token, "the resolver sees the stale claim")
	require.Equal(t, "fp", res.seen[0].Fingerprint)
	rec := e.get(r)
	require.Equal(t, backend.StateDone, rec.State)
	require.Equal(t, "committed", rec.Recovered)
	require.True(t, rec.ExpiresAt.Equal(e.clk.Now().Add(retention)))
	e.requireSealed(nb, r)
	e.replay(r)
	require.Equal(t, 1, res.n(), "a resolved claim is not asked about again")
	require.Equal(t, 1, e.events.count(idem.EventRecovered, "k"))
}

func testRecoveryNotCommitted(t *testing.T, nb source) {
	res := answer(idem.VerdictNotCommitted, backend.Result{})
	e := newEnv(t, nb, withResolver(res))
	r := req("k", "fp")
	old := e.claim(r)
	e.clk.Advance(lease)
	runs := 0
	out, replayed, err := e.store.Do(ctx, r, func(context.Context) (backend.Result, error) { runs++; return okResult("second"), nil })
	require.NoError(t, err)
	require.False(t, replayed)
	require.Equal(t, "second", string(out.Body))
	require.Equal(t, 1, runs, "not committed: the next request runs the effect")
	require.Equal(t, 1, res.n())
	require.ErrorIs(t, old.Complete(ctx, okResult("first")), backend.ErrFenced)
	require.Equal(t, 2, e.get(r).Claims)
}

func testRecoveryUnknown(t *testing.T, nb source) {
	res := answer(idem.VerdictUnknown, backend.Result{})
	e := newEnv(t, nb, withResolver(res), func(o *idem.Options) {
		o.MaxUnknown = 3
		o.RecheckBackoff = time.Minute
	})
	r := req("k", "fp")
	e.claim(r)
	e.clk.Advance(lease)

	_, _, err := e.store.Begin(ctx, r)
	var ue *idem.OutcomeUnknownError
	require.ErrorIs(t, err, idem.ErrOutcomeUnknown)
	require.True(t, errors.As(err, &ue))
	require.Equal(t, 1, ue.Checks)
	require.False(t, ue.Attention)
	require.True(t, ue.NextCheck.Equal(e.clk.Now().Add(time.Minute)))
	require.Equal(t, 1, res.n())

	// Before the next check is due the resolver is not asked again.
	_, _, err = e.store.Begin(ctx, r)
	require.ErrorIs(t, err, idem.ErrOutcomeUnknown)
	require.Equal(t, 1, res.n())
	stale, err := e.b.Stale(ctx, e.clk.Now(), 10)
	require.NoError(t, err)
	require.Empty(t, stale)

	e.clk.Advance(time.Minute)
	_, _, err = e.store.Begin(ctx, r)
	require.True(t, errors.As(err, &ue))
	require.Equal(t, 2, ue.Checks)
	require.True(t, ue.NextCheck.Equal(e.clk.Now().Add(2*time.Minute)), "the back-off doubles")

	e.clk.Advance(2 * time.Minute)
	_, _, err = e.store.Begin(ctx, r)
	require.ErrorIs(t, err, idem.ErrNeedsAttention)
	require.True(t, errors.As(err, &ue))
	require.True(t, ue.Attention)
	require.Equal(t, 3, res.n())
	require.Equal(t, 1, e.events.count(idem.EventAttention, "k"))

	// Needing attention: never asked again, never run again.
	e.clk.Advance(time.Hour)
	rep, err := e.store.Sweep(ctx)
	require.NoError(t, err)
	require.Zero(t, rep.Stale)
	_, _, err = e.store.Do(ctx, r, func(context.Context) (backend.Result, error) {
		t.Fatal("a claim needing attention ran again")
		return backend.Result{}, nil
	})
	require.ErrorIs(t, err, idem.ErrNeedsAttention)
	require.Equal(t, 3, res.n())
	rec := e.get(r)
	require.True(t, rec.Attention)
	require.Equal(t, 3, rec.Checks)
}

func testRecoveryResolverError(t *testing.T, nb source) {
	res := &countingResolver{fn: func(*backend.Record) (idem.Resolution, error) {
		return idem.Resolution{Verdict: idem.VerdictCommitted}, errors.New("ledger unreachable")
	}}
	e := newEnv(t, nb, withResolver(res))
	r := req("k", "fp")
	e.claim(r)
	e.clk.Advance(lease)
	_, _, err := e.store.Begin(ctx, r)
	require.ErrorIs(t, err, idem.ErrOutcomeUnknown, "a resolver error counts as unknown, whatever verdict came with it")
	require.Equal(t, backend.StateInProgress, e.get(r).State)
	require.GreaterOrEqual(t, e.events.count(idem.EventError, "k"), 1)
}

func testRecoveryNoResolver(t *testing.T, nb source) {
	e := newEnv(t, nb)
	r := req("k", "fp")
	e.claim(r)
	e.clk.Advance(lease)
	for range 3 {
		_, _, err := e.store.Do(ctx, r, func(context.Context) (backend.Result, error) {
			t.Fatal("a stale claim ran again with no resolver")
			return backend.Result{}, nil
		})
		require.ErrorIs(t, err, idem.ErrOutcomeUnknown)
	}
	rep, err := e.store.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Stale)
	require.Equal(t, 1, rep.Unresolved)
	require.Equal(t, backend.StateInProgress, e.get(r).State)
	require.GreaterOrEqual(t, e.events.count(idem.EventStale, "k"), 1)
}

func testRecoverySweep(t *testing.T, nb source) {
	verdicts := map[string]idem.Verdict{"c": idem.VerdictCommitted, "n": idem.VerdictNotCommitted, "u": idem.VerdictUnknown}
	res := &countingResolver{fn: func(rec *backend.Record) (idem.Resolution, error) {
		return idem.Resolution{Verdict: verdicts[rec.Key[:1]], Result: okResult("ledger:" + rec.Key)}, nil
	}}
	e := newEnv(t, nb, withResolver(res))
	for _, p := range []string{"c", "n", "u"} {
		for i := range 4 {
			e.claim(req(keyN(p, i), "fp"))
		}
	}
	live := e.claim(req("live", "fp"))
	e.clk.Advance(lease)
	require.NoError(t, live.Extend(ctx))
	rep, err := e.store.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, idem.SweepReport{Stale: 12, Committed: 4, NotCommitted: 4, Unknown: 4}, rep)
	for i := range 4 {
		require.Equal(t, "ledger:"+keyN("c", i), string(e.replay(req(keyN("c", i), "fp")).Body))
		e.claim(req(keyN("n", i), "fp"))
		_, _, err := e.store.Begin(ctx, req(keyN("u", i), "fp"))
		require.ErrorIs(t, err, idem.ErrOutcomeUnknown)
	}
	_, _, err = e.store.Begin(ctx, req("live", "fp"))
	require.ErrorIs(t, err, idem.ErrInProgress, "a live claim is never recovered")
	require.Equal(t, 12, res.n())
}

func testRecoveryMismatch(t *testing.T, nb source) {
	res := answer(idem.VerdictCommitted, okResult("x"))
	e := newEnv(t, nb, withResolver(res))
	e.claim(req("k", "fp-a"))
	e.clk.Advance(lease)
	_, _, err := e.store.Begin(ctx, req("k", "fp-b"))
	require.ErrorIs(t, err, idem.ErrMismatch)
	require.Zero(t, res.n())
}
