package idemtest

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/stretchr/testify/require"
)

// The error policy: save, release or hold each result, and a panic.

func testPolicyErrorReleases(t *testing.T, nb source) {
	e := newEnv(t, nb)
	r := req("k", "fp")
	boom := errors.New("downstream said no")
	_, replayed, err := e.store.Do(ctx, r, func(context.Context) (backend.Result, error) { return backend.Result{}, boom })
	require.ErrorIs(t, err, boom)
	require.False(t, replayed)
	require.Equal(t, backend.StateReleased, e.get(r).State)
	runs := 0
	_, replayed, err = e.store.Do(ctx, r, func(context.Context) (backend.Result, error) { runs++; return okResult("ok"), nil })
	require.NoError(t, err)
	require.False(t, replayed, "a released key runs again")
	require.Equal(t, 1, runs)
	require.Equal(t, 2, e.get(r).Claims)
}

func testPolicy5xxReleases(t *testing.T, nb source) {
	e := newEnv(t, nb)
	r := req("k", "fp")
	_, _, err := e.store.Do(ctx, r, func(context.Context) (backend.Result, error) { return backend.Result{Status: 502}, nil })
	require.NoError(t, err)
	_, replayed, err := e.store.Do(ctx, r, func(context.Context) (backend.Result, error) { return backend.Result{Status: 201}, nil })
	require.NoError(t, err)
	require.False(t, replayed)
	res, replayed, err := e.store.Do(ctx, r, func(context.Context) (backend.Result, error) { return backend.Result{Status: 299}, nil })
	require.NoError(t, err)
	require.True(t, replayed)
	require.Equal(t, 201, res.Status)
}

func testPolicySave(t *testing.T, nb source) {
	e := newEnv(t, nb, func(o *idem.Options) {
		o.Policy = func(backend.Result, error) idem.Decision { return idem.DecisionSave }
		// This policy saves errors to replay them: keep their text.
		o.ErrorText = error.Error
	})
	r := req("k", "fp")
	_, _, err := e.store.Do(ctx, r, func(context.Context) (backend.Result, error) {
		return backend.Result{Status: 500, Body: []byte("oops")}, errors.New("card declined")
	})
	require.EqualError(t, err, "card declined")
	res, replayed, err := e.store.Do(ctx, r, func(context.Context) (backend.Result, error) {
		t.Fatal("a saved failure must replay, not run again")
		return backend.Result{}, nil
	})
	require.True(t, replayed)
	var se *idem.SavedError
	require.True(t, errors.As(err, &se))
	require.Equal(t, "card declined", se.Message)
	require.Equal(t, 500, res.Status)
	require.Equal(t, "oops", string(res.Body))
}

func testPolicyHold(t *testing.T, nb source) {
	res := answer(idem.VerdictCommitted, okResult("from-downstream"))
	e := newEnv(t, nb, withResolver(res), func(o *idem.Options) {
		o.Policy = func(_ backend.Result, err error) idem.Decision {
			if errors.Is(err, context.DeadlineExceeded) {
				return idem.DecisionHold
			}
			return idem.DefaultPolicy(backend.Result{}, err)
		}
	})
	r := req("k", "fp")
	_, _, err := e.store.Do(ctx, r, func(context.Context) (backend.Result, error) {
		return backend.Result{}, context.DeadlineExceeded
	})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	rec := e.get(r)
	require.Equal(t, backend.StateInProgress, rec.State, "held claims stay in progress")
	require.True(t, rec.Stale(e.clk.Now()), "a held claim's lease ends with the hold")
	// The timed-out write may still land: within the grace the Resolver is
	// not asked, and a repeat is told the outcome is unknown, and when to
	// come back.
	grace := e.store.Options().RecoveryGrace
	_, _, err = e.store.Do(ctx, r, func(context.Context) (backend.Result, error) {
		t.Fatal("a held claim must not run again before recovery")
		return backend.Result{}, nil
	})
	var unk *idem.OutcomeUnknownError
	require.ErrorAs(t, err, &unk)
	require.True(t, unk.NextCheck.Equal(rec.LeaseEnds.Add(grace)), "next check %v, want the hold plus the grace", unk.NextCheck)
	require.Zero(t, res.n(), "the Resolver was asked within the grace")
	e.clk.Advance(grace)
	out, replayed, err := e.store.Do(ctx, r, func(context.Context) (backend.Result, error) {
		t.Fatal("a held claim must not run again before recovery")
		return backend.Result{}, nil
	})
	require.NoError(t, err)
	require.True(t, replayed)
	require.Equal(t, "from-downstream", string(out.Body))
	require.Equal(t, 1, res.n())
}

// Without a Resolver nobody could later say whether a panicking effect
// acted, so its claim is released and a retry runs the effect again.
func testPolicyPanic(t *testing.T, nb source) {
	e := newEnv(t, nb)
	r := req("k", "fp")
	func() {
		defer func() {
			p := recover()
			require.Equal(t, "kaboom", p, "the panic must be re-raised unchanged")
		}()
		_, _, _ = e.store.Do(ctx, r, func(context.Context) (backend.Result, error) { panic("kaboom") })
	}()
	require.Equal(t, backend.StateReleased, e.get(r).State)
	_, replayed, err := e.store.Do(ctx, r, func(context.Context) (backend.Result, error) { return okResult("ok"), nil })
	require.NoError(t, err)
	require.False(t, replayed)
}

// A panic after the effect may have acted is an unknown outcome: with a
// Resolver the claim is held for it, the panic re-raised, and the
// Resolver's decision is what the next request gets; the story says
// "panic".
func testPolicyPanicHeld(t *testing.T, nb source) {
	var acted []string // the effects that ran, by key
	resolver := idem.ResolverFunc(func(_ context.Context, rec *backend.Record) (idem.Resolution, error) {
		if rec.Key == "committed" {
			return idem.Resolution{Verdict: idem.VerdictCommitted, Result: okResult("from-downstream")}, nil
		}
		return idem.Resolution{Verdict: idem.VerdictNotCommitted}, nil
	})
	var asked atomic.Int32
	e := newEnv(t, nb, withResolver(idem.ResolverFunc(func(ctx context.Context, rec *backend.Record) (idem.Resolution, error) {
		asked.Add(1)
		return resolver(ctx, rec)
	})))
	panicking := func(ctx context.Context) (backend.Result, error) {
		c, _ := idem.ClaimFromContext(ctx)
		acted = append(acted, c.Key())
		panic("kaboom")
	}
	for _, key := range []string{"committed", "not-committed"} {
		func() {
			defer func() {
				require.Equal(t, "kaboom", recover(), "the panic must be re-raised unchanged")
			}()
			_, _, _ = e.store.Do(ctx, req(key, "fp"), panicking)
		}()
		rec := e.get(req(key, "fp"))
		require.Equal(t, backend.StateInProgress, rec.State, "a panic with a Resolver holds the claim")
		require.True(t, rec.Stale(e.clk.Now()), "a held claim's lease ends with the hold")
	}
	require.Equal(t, 2, e.events.countReason(idem.EventHeld, "panic"))
	// The effect may have sent a write before it panicked: within the grace
	// neither a sweep nor an access asks the Resolver.
	rep, err := e.store.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, rep.Unresolved)
	_, _, err = e.store.Do(ctx, req("committed", "fp"), func(context.Context) (backend.Result, error) {
		t.Fatal("a claim held after a panic must not run again before recovery")
		return backend.Result{}, nil
	})
	var unk *idem.OutcomeUnknownError
	require.ErrorAs(t, err, &unk)
	require.Equal(t, int32(0), asked.Load(), "the Resolver is asked on the first access or sweep after the grace, not before")
	e.clk.Advance(e.store.Options().RecoveryGrace)

	// On access: the Resolver says committed, and its result is replayed.
	r := req("committed", "fp")
	out, replayed, err := e.store.Do(ctx, r, func(context.Context) (backend.Result, error) {
		t.Fatal("a claim held after a panic must not run again before recovery")
		return backend.Result{}, nil
	})
	require.NoError(t, err)
	require.True(t, replayed)
	require.Equal(t, "from-downstream", string(out.Body))
	require.Equal(t, int32(1), asked.Load())
	rec := e.get(r)
	require.Equal(t, backend.StateDone, rec.State)
	require.Len(t, rec.Attempts, 1)
	require.Equal(t, "recovered: committed", rec.Attempts[0].Outcome)
	require.Equal(t, "panic", rec.Attempts[0].Reason, "the story says the attempt panicked")

	// In a sweep: the Resolver says not committed; the claim is released
	// and the next request runs the effect.
	rep, err = e.store.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.NotCommitted)
	require.Equal(t, int32(2), asked.Load())
	r = req("not-committed", "fp")
	rec = e.get(r)
	require.Equal(t, backend.StateReleased, rec.State)
	require.Len(t, rec.Attempts, 1)
	require.Contains(t, rec.Attempts[0].Reason, "panic")
	out, replayed, err = e.store.Do(ctx, r, func(context.Context) (backend.Result, error) { return okResult("second"), nil })
	require.NoError(t, err)
	require.False(t, replayed)
	require.Equal(t, "second", string(out.Body))
	require.Equal(t, []string{"committed", "not-committed"}, acted, "each panicking effect ran once")
}

// A backend.Holder keeps the note of a claim held after a panic in the
// claim's attempt, so that another process (here another Store over the
// same storage) that resolves the claim tells the same story. Backends
// that are not Holders keep no such note and skip.
func testPolicyPanicNoteKept(t *testing.T, nb source) {
	e := newEnv(t, nb, withResolver(idem.ResolverFunc(func(context.Context, *backend.Record) (idem.Resolution, error) {
		return idem.Resolution{Verdict: idem.VerdictNotCommitted}, nil
	})))
	if _, ok := e.b.(backend.Holder); !ok {
		t.Skip("the backend is not a backend.Holder: a held claim's note lives in its Store's memory")
	}
	func() {
		defer func() { require.Equal(t, "kaboom", recover()) }()
		_, _, _ = e.store.Do(ctx, req("k", "fp"), func(context.Context) (backend.Result, error) { panic("kaboom") })
	}()
	rec := e.get(req("k", "fp"))
	require.Equal(t, backend.StateInProgress, rec.State)
	require.Equal(t, "panic", rec.Attempts[len(rec.Attempts)-1].Reason, "the held claim's attempt carries the note")

	other := idem.New(unclosed{e.b}, &idem.Options{Clock: e.clk, SweepInterval: -1, Lease: lease, Retention: retention,
		RecoveryGrace: -1, // the claim is another live instance's: no wait for this test
		Resolver: idem.ResolverFunc(func(context.Context, *backend.Record) (idem.Resolution, error) {
			return idem.Resolution{Verdict: idem.VerdictNotCommitted}, nil
		})})
	defer other.Close()
	rep, err := other.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.NotCommitted)
	rec = e.get(req("k", "fp"))
	require.Equal(t, backend.StateReleased, rec.State)
	require.Equal(t, "recovered: not committed after a panic", rec.Attempts[len(rec.Attempts)-1].Reason,
		"another Store resolving the claim reads the note from the storage")
}

// The error policy's hold keeps its reason in the claim's attempt, as a
// panic does: another Store over the same storage reads why the claim is
// held, and the story of its recovery says so.
func testPolicyHoldNoteKept(t *testing.T, nb source) {
	notCommitted := idem.ResolverFunc(func(context.Context, *backend.Record) (idem.Resolution, error) {
		return idem.Resolution{Verdict: idem.VerdictNotCommitted}, nil
	})
	e := newEnv(t, nb, withResolver(notCommitted), func(o *idem.Options) {
		o.Policy = func(backend.Result, error) idem.Decision { return idem.DecisionHold }
	})
	if _, ok := e.b.(backend.Holder); !ok {
		t.Skip("the backend is not a backend.Holder: a held claim's note lives in its Store's memory")
	}
	_, _, err := e.store.Do(ctx, req("k", "fp"), func(context.Context) (backend.Result, error) {
		return backend.Result{}, context.DeadlineExceeded
	})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	_, _, err = e.store.Do(ctx, req("s", "fp"), func(context.Context) (backend.Result, error) {
		return backend.Result{Status: 504}, nil
	})
	require.NoError(t, err)
	rec := e.get(req("k", "fp"))
	require.Equal(t, backend.StateInProgress, rec.State)
	require.Equal(t, "held by the error policy: context deadline exceeded", rec.Attempts[len(rec.Attempts)-1].Reason,
		"the held claim's attempt says why, in Options.ErrorText's words")
	require.Equal(t, "held by the error policy: status 504", e.get(req("s", "fp")).Attempts[0].Reason)

	other := idem.New(unclosed{e.b}, &idem.Options{Clock: e.clk, SweepInterval: -1, Lease: lease, Retention: retention,
		RecoveryGrace: -1, Resolver: notCommitted})
	defer other.Close()
	rec, err = other.Get(ctx, "tenant-a", "k")
	require.NoError(t, err)
	require.Equal(t, "held by the error policy: context deadline exceeded", rec.Attempts[len(rec.Attempts)-1].Reason,
		"another process reads why the claim is held")
	rep, err := other.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, rep.NotCommitted)
	rec = e.get(req("k", "fp"))
	require.Equal(t, backend.StateReleased, rec.State)
	require.Equal(t, "recovered: not committed (held by the error policy: context deadline exceeded)",
		rec.Attempts[len(rec.Attempts)-1].Reason)
}

// unclosed is a backend whose Close does nothing: a second Store over a
// backend the first one owns.
type unclosed struct{ backend.Backend }

func (unclosed) Close() error { return nil }
