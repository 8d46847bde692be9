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

// Late completions (backend.LateCompleter): a holder paused past its lease
// finishes after recovery took its claim. A backend that is no
// LateCompleter skips these tests; Do then returns a
// *idem.LateCompletionError.

// lateCompleter returns nb's backend as a LateCompleter, or skips.
func lateCompleter(t *testing.T, nb source) (backend.Backend, backend.LateCompleter) {
	b := nb.open(t)
	closeBackend(t, b)
	lc, ok := b.(backend.LateCompleter)
	if !ok {
		t.Skip("the backend is no backend.LateCompleter: Do returns a *LateCompletionError")
	}
	return b, lc
}

// late is the LateCompletion the tests pass: result body, at now.
func late(body string, claimedAt, now time.Time) backend.LateCompletion {
	return backend.LateCompletion{
		Completion: backend.Completion{Result: okResult(body), At: now, ExpiresAt: now.Add(retention),
			Ending: backend.Ending{At: now, Outcome: "late", Reason: "why", Status: 200}},
		Fingerprint: "fp", Retention: retention, ClaimedAt: claimedAt, Owner: "late-owner",
		Twice: backend.Ending{At: now, Outcome: "twice", Reason: "twice why", Status: 200},
	}
}

// attemptOf returns rec's attempt with token, or fails.
func attemptOf(t *testing.T, rec *backend.Record, token uint64) backend.Attempt {
	t.Helper()
	for _, a := range rec.Attempts {
		if a.Token == token {
			return a
		}
	}
	t.Fatalf("no attempt with token %d in %+v", token, rec.Attempts)
	return backend.Attempt{}
}

func testBackendLateRecorded(t *testing.T, nb source) {
	b, lc := lateCompleter(t, nb)
	now := epoch
	// Released (recovery said "not committed"): recorded.
	rec, _, err := b.Claim(ctx, "s", "released", args("fp", now))
	require.NoError(t, err)
	require.NoError(t, b.Release(ctx, "s", "released", rec.Token, backend.Releasing{At: now, ExpiresAt: now.Add(retention),
		Reason: "recovered: not committed", Ending: backend.Ending{At: now, Outcome: "released", Reason: "recovered: not committed"}}))
	at := now.Add(time.Minute)
	out, err := lc.CompleteLate(ctx, "s", "released", rec.Token, late("late", now, at))
	require.NoError(t, err)
	require.Equal(t, backend.LateRecorded, out)
	got, err := b.Get(ctx, "s", "released")
	require.NoError(t, err)
	require.Equal(t, backend.StateDone, got.State)
	require.Equal(t, "late", string(got.Result.Body))
	require.True(t, got.ExpiresAt.Equal(at.Add(retention)))
	require.True(t, got.DoneAt.Equal(at))
	require.False(t, got.MayHaveRunTwice)
	require.Equal(t, 1, got.Claims)
	a := attemptOf(t, got, rec.Token)
	require.Equal(t, "late", a.Outcome)
	require.Equal(t, "why", a.Reason)
	require.True(t, a.EndedAt.Equal(at))
	_, claimed, err := b.Claim(ctx, "s", "released", args("fp", at))
	require.NoError(t, err)
	require.False(t, claimed, "a late result replays like any done record")

	// Once recorded, the same late completion changes nothing.
	out, err = lc.CompleteLate(ctx, "s", "released", rec.Token, late("again", now, at.Add(time.Minute)))
	require.NoError(t, err)
	require.Equal(t, backend.LateRecorded, out)
	got, err = b.Get(ctx, "s", "released")
	require.NoError(t, err)
	require.Equal(t, "late", string(got.Result.Body))

	// Absent (released, then reclaimed): a new life holding the late result.
	rec, _, err = b.Claim(ctx, "s", "absent", args("fp", now))
	require.NoError(t, err)
	require.NoError(t, b.Release(ctx, "s", "absent", rec.Token, backend.Releasing{At: now, ExpiresAt: now.Add(time.Second)}))
	_, err = b.Reclaim(ctx, now.Add(time.Second), 100)
	require.NoError(t, err)
	_, err = b.Get(ctx, "s", "absent")
	require.ErrorIs(t, err, backend.ErrNotFound)
	out, err = lc.CompleteLate(ctx, "s", "absent", rec.Token, late("late", now, at))
	require.NoError(t, err)
	require.Equal(t, backend.LateRecorded, out)
	got, err = b.Get(ctx, "s", "absent")
	require.NoError(t, err)
	require.Equal(t, backend.StateDone, got.State)
	require.Equal(t, "late", string(got.Result.Body))
	require.Equal(t, rec.Token, got.Token)
	require.Equal(t, "fp", got.Fingerprint)
	require.Equal(t, 1, got.Claims)
	require.True(t, got.FirstSeen.Equal(now))
	require.Len(t, got.Attempts, 1)
	a = got.Attempts[0]
	require.Equal(t, rec.Token, a.Token)
	require.Equal(t, "late-owner", a.Owner)
	require.Equal(t, "late", a.Outcome)
	require.True(t, a.ClaimedAt.Equal(now))
	// Still held by the late claim (its Complete failed otherwise): it
	// completes as Complete would.
	rec, _, err = b.Claim(ctx, "s", "held", args("fp", now))
	require.NoError(t, err)
	out, err = lc.CompleteLate(ctx, "s", "held", rec.Token, late("late", now, at))
	require.NoError(t, err)
	require.Equal(t, backend.LateRecorded, out)
	got, err = b.Get(ctx, "s", "held")
	require.NoError(t, err)
	require.Equal(t, backend.StateDone, got.State)
	require.Equal(t, "late", string(got.Result.Body))
	require.Equal(t, "late", attemptOf(t, got, rec.Token).Outcome)
	stale, err := b.Stale(ctx, at.Add(lease), 10)
	require.NoError(t, err)
	require.Empty(t, stale, "no open claim is left behind")

	// They expire and are reclaimed like any done record.
	refs, err := b.Reclaim(ctx, at.Add(retention), 100)
	require.NoError(t, err)
	require.Len(t, refs, 3)
}

func testBackendLateRanTwice(t *testing.T, nb source) {
	b, lc := lateCompleter(t, nb)
	now := epoch
	for _, done := range []bool{false, true} {
		key := "claimed-again"
		if done {
			key = "done-again"
		}
		first, _, err := b.Claim(ctx, "s", key, args("fp", now))
		require.NoError(t, err)
		require.NoError(t, b.Release(ctx, "s", key, first.Token, backend.Releasing{At: now, ExpiresAt: now.Add(retention),
			Ending: backend.Ending{At: now, Outcome: "released", Reason: "recovered: not committed"}}))
		second, claimed, err := b.Claim(ctx, "s", key, args("fp", now.Add(time.Second)))
		require.NoError(t, err)
		require.True(t, claimed)
		if done {
			require.NoError(t, b.Complete(ctx, "s", key, second.Token, backend.Completion{Result: okResult("newer"),
				At: now.Add(2 * time.Second), ExpiresAt: now.Add(retention)}))
		}
		at := now.Add(time.Minute)
		out, err := lc.CompleteLate(ctx, "s", key, first.Token, late("late", now, at))
		require.NoError(t, err)
		require.Equal(t, backend.LateRanTwice, out, key)
		got, err := b.Get(ctx, "s", key)
		require.NoError(t, err)
		require.True(t, got.MayHaveRunTwice, key)
		require.Equal(t, second.Token, got.Token, "the newer holder's claim stands")
		require.Equal(t, 2, got.Claims)
		a := attemptOf(t, got, first.Token)
		require.Equal(t, "twice", a.Outcome)
		require.Equal(t, "twice why", a.Reason)
		require.True(t, a.EndedAt.Equal(at))
		require.NotEqual(t, "twice", attemptOf(t, got, second.Token).Outcome, "the newer attempt is not the late one")
		if !done {
			require.Equal(t, backend.StateInProgress, got.State)
			require.True(t, got.LeaseEnds.Equal(second.LeaseEnds), "the newer claim's lease stays")
			// The newer holder completes: its outcome stands, the mark stays.
			require.NoError(t, b.Complete(ctx, "s", key, second.Token, backend.Completion{Result: okResult("newer"),
				At: at, ExpiresAt: at.Add(retention)}))
			got, err = b.Get(ctx, "s", key)
			require.NoError(t, err)
			require.True(t, got.MayHaveRunTwice, "the newer holder's completion keeps the mark")
		}
		require.Equal(t, backend.StateDone, got.State)
		require.Equal(t, "newer", string(got.Result.Body), "the newer holder's result replays")
		_, claimed, err = b.Claim(ctx, "s", key, args("fp", at))
		require.NoError(t, err)
		require.False(t, claimed)
	}
	// A released record keeps the mark into its next claim; a new life
	// (expired, claimed again) starts without it.
	first, _, err := b.Claim(ctx, "s", "kept", args("fp", now))
	require.NoError(t, err)
	require.NoError(t, b.Release(ctx, "s", "kept", first.Token, backend.Releasing{At: now, ExpiresAt: now.Add(retention)}))
	second, _, err := b.Claim(ctx, "s", "kept", args("fp", now))
	require.NoError(t, err)
	out, err := lc.CompleteLate(ctx, "s", "kept", first.Token, late("late", now, now))
	require.NoError(t, err)
	require.Equal(t, backend.LateRanTwice, out)
	require.NoError(t, b.Release(ctx, "s", "kept", second.Token, backend.Releasing{At: now, ExpiresAt: now.Add(time.Second)}))
	third, claimed, err := b.Claim(ctx, "s", "kept", args("fp", now))
	require.NoError(t, err)
	require.True(t, claimed)
	require.True(t, third.MayHaveRunTwice, "a released record's life goes on, and its mark")
	require.NoError(t, b.Complete(ctx, "s", "kept", third.Token, backend.Completion{Result: okResult("r"), At: now, ExpiresAt: now.Add(time.Second)}))
	fourth, claimed, err := b.Claim(ctx, "s", "kept", args("fp", now.Add(time.Second)))
	require.NoError(t, err)
	require.True(t, claimed)
	require.False(t, fourth.MayHaveRunTwice, "an expired record's new life starts unmarked")
}

// pausedDo runs Do on e's store with an effect that waits, ignoring its
// context, until the returned resume is called, as a holder paused past
// its lease does. wait returns what Do returned.
func pausedDo(e *env, r idem.Request, res backend.Result) (resume func(), wait func() (backend.Result, error)) {
	running, unpause := make(chan struct{}), make(chan struct{})
	type answer struct {
		res backend.Result
		err error
	}
	done := make(chan answer, 1)
	go func() {
		out, _, err := e.store.Do(ctx, r, func(context.Context) (backend.Result, error) {
			close(running)
			<-unpause
			return res, nil
		})
		done <- answer{out, err}
	}()
	<-running
	return func() { close(unpause) }, func() (backend.Result, error) { a := <-done; return a.res, a.err }
}

// recoverNotCommitted ends r's claim as recovery does when the Resolver
// answers "not committed": the lease ends, the sweep releases it.
func recoverNotCommitted(t *testing.T, e *env) {
	t.Helper()
	e.clk.Advance(lease)
	rep, err := e.store.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.NotCommitted)
}

func testDoLateRecorded(t *testing.T, nb source) {
	lateCompleter(t, nb)
	for _, absent := range []bool{false, true} {
		e := newEnv(t, nb, withResolver(answer(idem.VerdictNotCommitted, backend.Result{})))
		r := req("k", "fp")
		resume, wait := pausedDo(e, r, backend.Result{Status: 201, Body: []byte("late")})
		recoverNotCommitted(t, e)
		if absent {
			e.clk.Advance(retention)
			rep, err := e.store.Sweep(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, rep.Expired)
			_, err = e.store.Get(ctx, r.Scope, r.Key)
			require.ErrorIs(t, err, backend.ErrNotFound)
		}
		resume()
		out, err := wait()
		require.NoError(t, err, "recorded late: the effect ran once and is recorded")
		require.Equal(t, "late", string(out.Body))
		got := e.replay(r)
		require.Equal(t, 201, got.Status)
		require.Equal(t, "late", string(got.Body))
		e.requireSealed(nb, r)
		rec := e.get(r)
		require.False(t, rec.MayHaveRunTwice)
		last := rec.Attempts[len(rec.Attempts)-1]
		require.Equal(t, "completed late", last.Outcome)
		require.Equal(t, 1, e.events.count(idem.EventCompletedLate, "k"))
		require.Zero(t, e.events.count(idem.EventRanTwice, "k"))
	}
}

func testDoLateRanTwice(t *testing.T, nb source) {
	lateCompleter(t, nb)
	for _, newerDone := range []bool{false, true} {
		e := newEnv(t, nb, withResolver(answer(idem.VerdictNotCommitted, backend.Result{})))
		r := req("k", "fp")
		resume, wait := pausedDo(e, r, backend.Result{Status: 201, Body: []byte("late")})
		recoverNotCommitted(t, e)
		newer := e.claim(r)
		if newerDone {
			require.NoError(t, newer.Complete(ctx, okResult("newer")))
		}
		resume()
		out, err := wait()
		require.ErrorIs(t, err, idem.ErrRanTwice)
		require.ErrorIs(t, err, idem.ErrOutcomeNotRecorded)
		require.ErrorIs(t, err, backend.ErrFenced)
		var twice *idem.RanTwiceError
		require.True(t, errors.As(err, &twice), "%v", err)
		require.Equal(t, "k", twice.Key)
		require.NotEqual(t, newer.Token(), twice.Token)
		require.Equal(t, "late", string(out.Body), "Do still hands back what fn returned")
		if !newerDone {
			require.True(t, e.get(r).MayHaveRunTwice)
			require.NoError(t, newer.Complete(ctx, okResult("newer")))
		}
		require.Equal(t, "newer", string(e.replay(r).Body))
		rec := e.get(r)
		require.True(t, rec.MayHaveRunTwice, "marked, and the newer completion kept the mark")
		lateAttempt := attemptOf(t, rec, twice.Token)
		require.Equal(t, "completed late: may have run twice", lateAttempt.Outcome)
		require.Equal(t, "completed", attemptOf(t, rec, newer.Token()).Outcome)
		require.Equal(t, 1, e.events.count(idem.EventRanTwice, "k"))
		require.Zero(t, e.events.count(idem.EventCompletedLate, "k"))
	}
}
