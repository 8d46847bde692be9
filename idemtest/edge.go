package idemtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/stretchr/testify/require"
)

// requireNotRecorded checks that err says "the effect ran, its outcome was
// not recorded", and never one of the errors that mean "it did not run".
func requireNotRecorded(t *testing.T, err error) {
	t.Helper()
	require.ErrorIs(t, err, idem.ErrOutcomeNotRecorded, "got %v", err)
	require.NotErrorIs(t, err, backend.ErrUnavailable, "an unrecorded outcome must not read as \"did not run\"")
	require.NotErrorIs(t, err, backend.ErrClosed, "an unrecorded outcome must not read as \"did not run\"")
	var nr *idem.NotRecordedError
	require.True(t, errors.As(err, &nr))
	require.NotNil(t, nr.Cause)
}

// testContractNotRecorded fails every way a claim can end after its effect
// ran: save, release and hold, through Do and by hand.
func testContractNotRecorded(t *testing.T, nb source) {
	var f *failing
	hold := false
	e := newEnv(t, nb.wrap(func(t testing.TB) backend.Backend {
		f = &failing{Backend: nb.open(t)}
		return f
	}), func(o *idem.Options) {
		o.Policy = func(res backend.Result, err error) idem.Decision {
			if hold {
				return idem.DecisionHold
			}
			return idem.DefaultPolicy(res, err)
		}
	})
	effectErr := errors.New("card declined")
	cases := []struct {
		name string
		hold bool
		err  error
	}{{"save", false, nil}, {"release", false, effectErr}, {"hold", true, nil}}
	for _, tc := range cases {
		hold = tc.hold
		r := req("do-"+tc.name, "fp")
		_, _, err := e.store.Do(ctx, r, func(context.Context) (backend.Result, error) {
			f.set(true)
			return okResult("x"), tc.err
		})
		f.set(false)
		requireNotRecorded(t, err)
		var nr *idem.NotRecordedError
		require.True(t, errors.As(err, &nr))
		require.Equal(t, tc.err, nr.Err, "%s: the effect's own error is kept", tc.name)
		require.Equal(t, r.Key, nr.Key)
		require.Equal(t, backend.StateInProgress, e.get(r).State, "%s: the claim stays for recovery", tc.name)
	}
	hold = false

	ends := map[string]func(*idem.Claim) error{
		"release": func(c *idem.Claim) error { return c.Release(ctx, "by hand") },
		"hold":    func(c *idem.Claim) error { return c.Hold(ctx) },
	}
	for name, end := range ends {
		r := req("by-hand-"+name, "fp")
		c := e.claim(r)
		f.set(true)
		requireNotRecorded(t, end(c))
		f.set(false)
		require.Equal(t, backend.StateInProgress, e.get(r).State, "%s: the claim stays for recovery", name)
	}
}

// testContractClosedUnderEffect closes the store while an effect runs and
// CloseTimeout runs out: Do's error says the outcome was not recorded, not
// that the store was closed (which means "nothing ran").
func testContractClosedUnderEffect(t *testing.T, nb source) {
	e := newEnv(t, nb)
	started := make(chan struct{})
	closed := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, _, err := e.store.Do(ctx, req("k", "fp"), func(context.Context) (backend.Result, error) {
			close(started)
			<-closed
			return okResult("x"), nil
		})
		done <- err
	}()
	<-started
	require.NoError(t, e.store.Close())
	close(closed)
	err := <-done
	requireNotRecorded(t, err)
	var nr *idem.NotRecordedError
	require.True(t, errors.As(err, &nr))
	require.ErrorIs(t, nr.Cause, backend.ErrClosed, "the cause is kept in the error's fields")
}

// testContractReservedScope: scopes starting with backend.ReservedScopePrefix
// are idem's own (the Journal's, whose stale claims recovery runs again
// without asking the Resolver); a caller's request there is refused before
// anything runs, even when the Journal's record is in the replay cache.
func testContractReservedScope(t *testing.T, nb source) {
	e := newEnv(t, nb)
	for _, scope := range []string{idem.JournalScope, backend.ReservedScopePrefix, "idem.tenant-7"} {
		require.ErrorIs(t, backend.ValidateScope(scope), backend.ErrInvalidKey, scope)
		require.NoError(t, backend.ValidateStoredScope(scope), scope)
	}
	for _, scope := range []string{"idem", "idemx.a", "tenant.idem.journal", ""} {
		require.NoError(t, backend.ValidateScope(scope), scope)
	}

	j := idem.NewJournal(e.store, nil)
	st, err := j.Plan(ctx, "run-1", 1, "refund", []byte(`{"amount":5}`))
	require.NoError(t, err)
	rec, err := e.store.Get(ctx, idem.JournalScope, st.Key)
	require.NoError(t, err, "Get reads idem's own scopes")
	r := idem.Request{Scope: idem.JournalScope, Key: st.Key, Fingerprint: rec.Fingerprint}
	for i := 0; i < 2; i++ {
		c, res, err := e.store.Begin(ctx, r)
		require.ErrorIs(t, err, backend.ErrInvalidKey)
		require.Nil(t, c)
		require.Nil(t, res, "a journal record is never replayed to a caller")
	}
	ran := false
	_, _, err = e.store.Do(ctx, idem.Request{Scope: "idem.journal", Key: "refund-1", Fingerprint: "fp"},
		func(context.Context) (backend.Result, error) { ran = true; return backend.Result{}, nil })
	require.ErrorIs(t, err, backend.ErrInvalidKey)
	require.False(t, ran)
}

// testSettle: an operator settles stale claims (one marked as needing
// attention, one merely stale) as committed with a result or as not
// committed; the story says who and why; live, done and absent keys are
// refused, and a settled claim's old token changes nothing.
func testSettle(t *testing.T, nb source) {
	e := newEnv(t, nb, withResolver(answer(idem.VerdictUnknown, backend.Result{})),
		func(o *idem.Options) { o.MaxUnknown = 1 })
	paid := req("paid", "fp")
	unpaid := req("unpaid", "fp")
	old := e.claim(paid)
	e.claim(unpaid)

	err := e.store.Settle(ctx, "tenant-a", "paid", idem.VerdictCommitted, okResult(`{"refund":"r1"}`), "alice: ledger has r1", nil)
	require.ErrorIs(t, err, idem.ErrNothingToSettle, "a live claim is not settled")
	require.ErrorIs(t, err, idem.ErrInProgress)

	e.clk.Advance(2 * lease)
	_, _, err = e.store.Begin(ctx, paid)
	require.ErrorIs(t, err, idem.ErrNeedsAttention)

	require.NoError(t, e.store.Settle(ctx, "tenant-a", "paid", idem.VerdictCommitted, okResult(`{"refund":"r1"}`),
		"alice: ledger has r1", nil))
	require.Equal(t, `{"refund":"r1"}`, string(e.replay(paid).Body))
	rec := e.get(paid)
	require.Equal(t, backend.StateDone, rec.State)
	require.Equal(t, "settled: committed", rec.Recovered)
	last := rec.Attempts[len(rec.Attempts)-1]
	require.Equal(t, "settled: committed", last.Outcome)
	require.Equal(t, "alice: ledger has r1", last.Reason)
	require.ErrorIs(t, old.Complete(ctx, okResult("late")), backend.ErrFenced, "the settled claim's holder changes nothing")
	require.Equal(t, `{"refund":"r1"}`, string(e.replay(paid).Body))

	require.NoError(t, e.store.Settle(ctx, "tenant-a", "unpaid", idem.VerdictNotCommitted, backend.Result{},
		"bob: provider has no charge", nil))
	rec = e.get(unpaid)
	require.Equal(t, backend.StateReleased, rec.State)
	require.Equal(t, "settled: not_committed", rec.Recovered)
	require.Contains(t, rec.Attempts[len(rec.Attempts)-1].Reason, "bob: provider has no charge")
	e.claim(unpaid) // the next request runs it

	err = e.store.Settle(ctx, "tenant-a", "paid", idem.VerdictNotCommitted, backend.Result{}, "again", nil)
	require.ErrorIs(t, err, idem.ErrNothingToSettle, "a done record is not settled")
	err = e.store.Settle(ctx, "tenant-a", "absent", idem.VerdictNotCommitted, backend.Result{}, "x", nil)
	require.ErrorIs(t, err, idem.ErrNothingToSettle)
	require.Error(t, e.store.Settle(ctx, "tenant-a", "unpaid", idem.VerdictUnknown, backend.Result{}, "x", nil))
	require.Equal(t, 2, e.events.countReason(idem.EventRecovered, "settled: "))
}

// testErrorText: the record keeps Options.ErrorText of an effect's error
// (by default a generic word), never its text, while the Observer gets the
// error itself.
func testErrorText(t *testing.T, nb source) {
	secret := errors.New("POST https://bank.example/refund?token=sk_live_123: 402")
	for _, tc := range []struct {
		name     string
		text     func(error) string
		released string // the released attempt's reason
		saved    string // the saved error
	}{
		{"default", nil, "error", "error"},
		{"hook", func(err error) string {
			if strings.Contains(err.Error(), "402") {
				return "payment refused"
			}
			return "error"
		}, "error: payment refused", "payment refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			save := false
			e := newEnv(t, nb, func(o *idem.Options) {
				o.ErrorText = tc.text
				o.Policy = func(res backend.Result, err error) idem.Decision {
					if save {
						return idem.DecisionSave
					}
					return idem.DefaultPolicy(res, err)
				}
			})
			fail := func(context.Context) (backend.Result, error) { return backend.Result{}, secret }
			_, _, err := e.store.Do(ctx, req("released", "fp"), fail)
			require.ErrorIs(t, err, secret, "the caller gets the error itself")
			rec := e.get(req("released", "fp"))
			require.Equal(t, tc.released, rec.Attempts[0].Reason)
			require.Equal(t, tc.released, rec.Recovered)
			save = true
			_, _, err = e.store.Do(ctx, req("saved", "fp"), fail)
			require.ErrorIs(t, err, secret)
			require.Equal(t, tc.saved, e.get(req("saved", "fp")).Result.Error)
			_, _, err = e.store.Do(ctx, req("saved", "fp"), fail)
			var se *idem.SavedError
			require.True(t, errors.As(err, &se))
			require.Equal(t, tc.saved, se.Message)

			e.events.mu.Lock()
			defer e.events.mu.Unlock()
			seen := 0
			for _, ev := range e.events.list {
				require.NotContains(t, ev.Reason, "sk_live", "%s", ev.Kind)
				if (ev.Kind == idem.EventReleased || ev.Kind == idem.EventCompleted) && ev.Err == secret {
					seen++
				}
			}
			require.Equal(t, 2, seen, "the Observer gets the error itself")
		})
	}
	require.Equal(t, "idem: storage unavailable", idem.DefaultErrorText(fmt.Errorf("wrapped: %w", backend.ErrUnavailable)))
	require.Equal(t, "context deadline exceeded", idem.DefaultErrorText(context.DeadlineExceeded))
}
