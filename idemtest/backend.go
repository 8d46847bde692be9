package idemtest

import (
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem/backend"
	"github.com/stretchr/testify/require"
)

// These tests call the Backend's primitives directly.

func closeBackend(t testing.TB, b backend.Backend) {
	t.Cleanup(func() { require.NoError(t, b.Close()) })
}

func args(fp string, now time.Time) backend.ClaimArgs {
	return backend.ClaimArgs{Fingerprint: fp, Now: now, LeaseEnds: now.Add(lease), Retention: retention, Owner: "test"}
}

func testBackendClaim(t *testing.T, nb source) {
	b := nb.open(t)
	closeBackend(t, b)
	now := epoch

	_, err := b.Get(ctx, "s", "k")
	require.ErrorIs(t, err, backend.ErrNotFound)

	rec, claimed, err := b.Claim(ctx, "s", "k", args("fp1", now))
	require.NoError(t, err)
	require.True(t, claimed)
	require.Equal(t, backend.StateInProgress, rec.State)
	require.Equal(t, "s", rec.Scope)
	require.Equal(t, "k", rec.Key)
	require.Equal(t, "fp1", rec.Fingerprint)
	require.NotZero(t, rec.Token)
	require.True(t, rec.LeaseEnds.Equal(now.Add(lease)))
	require.Equal(t, 1, rec.Claims)

	again, claimed, err := b.Claim(ctx, "s", "k", args("fp2", now.Add(time.Second)))
	require.NoError(t, err)
	require.False(t, claimed, "a second claim of a held key must not win")
	require.Equal(t, rec.Token, again.Token)
	require.Equal(t, "fp1", again.Fingerprint, "the stored record is returned unchanged")

	got, err := b.Get(ctx, "s", "k")
	require.NoError(t, err)
	require.Equal(t, rec.Token, got.Token)
	require.Equal(t, backend.StateInProgress, got.State)

	// A stale in-progress claim is not taken over by Claim: only recovery
	// (fenced Release or Complete) may end it.
	_, claimed, err = b.Claim(ctx, "s", "k", args("fp1", now.Add(10*lease)))
	require.NoError(t, err)
	require.False(t, claimed)

	// Done: not claimable until it expires, claimable at its expiry.
	require.NoError(t, b.Complete(ctx, "s", "k", rec.Token, backend.Completion{
		Result: okResult(`{"ok":true}`), At: now, ExpiresAt: now.Add(retention)}))
	done, claimed, err := b.Claim(ctx, "s", "k", args("fp1", now.Add(retention-time.Nanosecond)))
	require.NoError(t, err)
	require.False(t, claimed)
	require.Equal(t, backend.StateDone, done.State)
	require.Equal(t, `{"ok":true}`, string(done.Result.Body))
	require.Equal(t, 200, done.Result.Status)
	require.Equal(t, []string{"application/json"}, done.Result.Header["Content-Type"])

	fresh, claimed, err := b.Claim(ctx, "s", "k", args("fp9", now.Add(retention)))
	require.NoError(t, err)
	require.True(t, claimed, "an expired record counts as absent")
	require.NotEqual(t, rec.Token, fresh.Token)
	require.Equal(t, "fp9", fresh.Fingerprint)
	require.Equal(t, 1, fresh.Claims, "an expired record starts a new life")
	require.Nil(t, fresh.Result)

	// Released: claimable at once, and the story goes on.
	require.NoError(t, b.Release(ctx, "s", "k", fresh.Token, backend.Releasing{
		At: now.Add(retention), ExpiresAt: now.Add(2 * retention), Reason: "test"}))
	rel, err := b.Get(ctx, "s", "k")
	require.NoError(t, err)
	require.Equal(t, backend.StateReleased, rel.State)
	next, claimed, err := b.Claim(ctx, "s", "k", args("fp9", now.Add(retention+time.Second)))
	require.NoError(t, err)
	require.True(t, claimed)
	require.Equal(t, 2, next.Claims)
	require.True(t, next.FirstSeen.Equal(fresh.FirstSeen))
}

// testBackendClaimBrief: with ClaimArgs.Brief a done record may come with
// only what a replay reads, but those fields must be the stored ones; every
// other answer is whole.
func testBackendClaimBrief(t *testing.T, nb source) {
	b := nb.open(t)
	closeBackend(t, b)
	now := epoch
	brief := func(fp string, at time.Time) backend.ClaimArgs {
		a := args(fp, at)
		a.Brief = true
		return a
	}
	rec, claimed, err := b.Claim(ctx, "s", "k", brief("fp1", now))
	require.NoError(t, err)
	require.True(t, claimed)
	require.Equal(t, 1, rec.Claims, "a claimed record is whole")
	open, claimed, err := b.Claim(ctx, "s", "k", brief("fp2", now.Add(time.Second)))
	require.NoError(t, err)
	require.False(t, claimed)
	require.Equal(t, backend.StateInProgress, open.State)
	require.Equal(t, rec.Token, open.Token)
	require.Equal(t, 1, open.Claims, "an open claim is whole")
	require.True(t, open.LeaseEnds.Equal(rec.LeaseEnds), "an open claim is whole")

	require.NoError(t, b.Complete(ctx, "s", "k", rec.Token, backend.Completion{
		Result: okResult(`{"ok":true}`), At: now, ExpiresAt: now.Add(retention)}))
	whole, err := b.Get(ctx, "s", "k")
	require.NoError(t, err)
	done, claimed, err := b.Claim(ctx, "s", "k", brief("fp2", now.Add(time.Second)))
	require.NoError(t, err)
	require.False(t, claimed)
	require.Equal(t, "s", done.Scope)
	require.Equal(t, "k", done.Key)
	require.Equal(t, backend.StateDone, done.State)
	require.Equal(t, "fp1", done.Fingerprint)
	require.Equal(t, whole.Token, done.Token)
	require.True(t, done.ExpiresAt.Equal(whole.ExpiresAt))
	require.Equal(t, whole.Result, done.Result)

	fresh, claimed, err := b.Claim(ctx, "s", "k", brief("fp9", now.Add(retention)))
	require.NoError(t, err)
	require.True(t, claimed, "an expired record counts as absent")
	require.Equal(t, "fp9", fresh.Fingerprint)
	require.Nil(t, fresh.Result)
}

func testBackendFenced(t *testing.T, nb source) {
	b := nb.open(t)
	closeBackend(t, b)
	now := epoch
	rec, _, err := b.Claim(ctx, "s", "k", args("fp", now))
	require.NoError(t, err)
	bad := rec.Token + 1000

	var fe *backend.FencedError
	err = b.Complete(ctx, "s", "k", bad, backend.Completion{Result: okResult("x"), At: now, ExpiresAt: now.Add(retention)})
	require.ErrorIs(t, err, backend.ErrFenced)
	require.True(t, errors.As(err, &fe))
	require.Equal(t, bad, fe.Token)
	require.ErrorIs(t, b.Release(ctx, "s", "k", bad, backend.Releasing{At: now, ExpiresAt: now}), backend.ErrFenced)
	require.ErrorIs(t, b.Extend(ctx, "s", "k", bad, now.Add(time.Hour)), backend.ErrFenced)
	require.ErrorIs(t, b.Defer(ctx, "s", "k", bad, backend.Deferral{Checks: 3}), backend.ErrFenced)
	require.ErrorIs(t, b.Complete(ctx, "s", "other", rec.Token, backend.Completion{At: now, ExpiresAt: now}), backend.ErrFenced)

	got, err := b.Get(ctx, "s", "k")
	require.NoError(t, err)
	require.Equal(t, backend.StateInProgress, got.State)
	require.True(t, got.LeaseEnds.Equal(rec.LeaseEnds), "a fenced call changed the record")
	require.Zero(t, got.Checks)

	// The right token works once; after Complete, the claim is gone.
	require.NoError(t, b.Extend(ctx, "s", "k", rec.Token, now.Add(time.Hour)))
	got, err = b.Get(ctx, "s", "k")
	require.NoError(t, err)
	require.True(t, got.LeaseEnds.Equal(now.Add(time.Hour)))
	require.NoError(t, b.Defer(ctx, "s", "k", rec.Token, backend.Deferral{Checks: 2, NextCheck: now.Add(time.Minute)}))
	got, err = b.Get(ctx, "s", "k")
	require.NoError(t, err)
	require.Equal(t, 2, got.Checks)
	require.True(t, got.NextCheck.Equal(now.Add(time.Minute)))
	require.NoError(t, b.Complete(ctx, "s", "k", rec.Token, backend.Completion{Result: okResult("x"), At: now, ExpiresAt: now.Add(retention)}))
	require.ErrorIs(t, b.Complete(ctx, "s", "k", rec.Token, backend.Completion{Result: okResult("y"), At: now, ExpiresAt: now.Add(retention)}), backend.ErrFenced)
	require.ErrorIs(t, b.Release(ctx, "s", "k", rec.Token, backend.Releasing{At: now, ExpiresAt: now}), backend.ErrFenced)
	got, err = b.Get(ctx, "s", "k")
	require.NoError(t, err)
	require.Equal(t, "x", string(got.Result.Body), "a fenced Complete overwrote the result")
}

func testBackendStale(t *testing.T, nb source) {
	b := nb.open(t)
	closeBackend(t, b)
	now := epoch
	// Leases ending at now+1s, now+2s, ... now+5s; one done; one deferred;
	// one needing attention.
	tokens := map[string]uint64{}
	for i := 1; i <= 5; i++ {
		a := args("fp", now)
		a.LeaseEnds = now.Add(time.Duration(6-i) * time.Second)
		rec, claimed, err := b.Claim(ctx, "s", keyN("k", i), a)
		require.NoError(t, err)
		require.True(t, claimed)
		tokens[rec.Key] = rec.Token
	}
	done, _, err := b.Claim(ctx, "s", "done", args("fp", now))
	require.NoError(t, err)
	require.NoError(t, b.Complete(ctx, "s", "done", done.Token, backend.Completion{Result: okResult("d"), At: now, ExpiresAt: now.Add(retention)}))
	require.NoError(t, b.Defer(ctx, "s", keyN("k", 1), tokens[keyN("k", 1)], backend.Deferral{Checks: 1, NextCheck: now.Add(time.Hour)}))
	require.NoError(t, b.Defer(ctx, "s", keyN("k", 2), tokens[keyN("k", 2)], backend.Deferral{Checks: 5, Attention: true}))

	stale, err := b.Stale(ctx, now, 10)
	require.NoError(t, err)
	require.Empty(t, stale, "no lease has ended yet")

	stale, err = b.Stale(ctx, now.Add(time.Minute), 10)
	require.NoError(t, err)
	keys := []string{}
	for _, r := range stale {
		keys = append(keys, r.Key)
		require.Equal(t, backend.StateInProgress, r.State)
	}
	require.Equal(t, []string{keyN("k", 5), keyN("k", 4), keyN("k", 3)}, keys,
		"stale claims come oldest lease first, without deferred, attention or done records")

	stale, err = b.Stale(ctx, now.Add(time.Minute), 2)
	require.NoError(t, err)
	require.Len(t, stale, 2)

	stale, err = b.Stale(ctx, now.Add(2*time.Second), 10)
	require.NoError(t, err)
	require.Len(t, stale, 2, "only leases ended at or before now")

	stale, err = b.Stale(ctx, now.Add(2*time.Hour), 10)
	require.NoError(t, err)
	require.Len(t, stale, 4, "a deferred claim comes back once its next check is due")
}

func testBackendReclaim(t *testing.T, nb source) {
	b := nb.open(t)
	closeBackend(t, b)
	now := epoch
	for i := range 10 {
		rec, _, err := b.Claim(ctx, "s", keyN("k", i), args("fp", now))
		require.NoError(t, err)
		exp := now.Add(time.Duration(i+1) * time.Minute)
		if i%2 == 0 {
			require.NoError(t, b.Complete(ctx, "s", rec.Key, rec.Token, backend.Completion{Result: okResult("r"), At: now, ExpiresAt: exp}))
		} else {
			require.NoError(t, b.Release(ctx, "s", rec.Key, rec.Token, backend.Releasing{At: now, ExpiresAt: exp}))
		}
	}
	live, _, err := b.Claim(ctx, "s", "live", args("fp", now))
	require.NoError(t, err)

	refs, err := b.Reclaim(ctx, now, 100)
	require.NoError(t, err)
	require.Empty(t, refs)

	refs, err = b.Reclaim(ctx, now.Add(5*time.Minute), 3)
	require.NoError(t, err)
	require.Len(t, refs, 3, "limit bounds one call")
	refs2, err := b.Reclaim(ctx, now.Add(5*time.Minute), 100)
	require.NoError(t, err)
	require.Len(t, refs2, 2, "the rest that is due, and nothing more")
	for _, r := range append(refs, refs2...) {
		_, err := b.Get(ctx, "s", r.Key)
		require.ErrorIs(t, err, backend.ErrNotFound)
	}
	_, err = b.Get(ctx, "s", keyN("k", 5))
	require.NoError(t, err, "a record not yet expired is kept")

	// A key claimed again after it expired must not be deleted by its old
	// expiry.
	again, claimed, err := b.Claim(ctx, "s", keyN("k", 6), args("fp", now.Add(8*time.Minute)))
	require.NoError(t, err)
	require.True(t, claimed)
	refs, err = b.Reclaim(ctx, now.Add(time.Hour), 100)
	require.NoError(t, err)
	require.Len(t, refs, 4, "k-0005 and k-0007 to k-0009; k-0006 lives again")
	got, err := b.Get(ctx, "s", keyN("k", 6))
	require.NoError(t, err)
	require.Equal(t, again.Token, got.Token)
	_, err = b.Get(ctx, "s", "live")
	require.NoError(t, err, "an open claim is never reclaimed")
	require.NotZero(t, live.Token)
}

func testBackendCopies(t *testing.T, nb source) {
	b := nb.open(t)
	closeBackend(t, b)
	rec, _, err := b.Claim(ctx, "s", "k", args("fp", epoch))
	require.NoError(t, err)
	res := okResult("body")
	require.NoError(t, b.Complete(ctx, "s", "k", rec.Token, backend.Completion{Result: res, At: epoch, ExpiresAt: epoch.Add(retention)}))
	res.Body[0] = 'X'
	got, err := b.Get(ctx, "s", "k")
	require.NoError(t, err)
	require.Equal(t, "body", string(got.Result.Body), "the backend kept a reference to the caller's bytes")
	got.Result.Body[0] = 'Y'
	got.Fingerprint = "changed"
	again, err := b.Get(ctx, "s", "k")
	require.NoError(t, err)
	require.Equal(t, "body", string(again.Result.Body))
	require.Equal(t, "fp", again.Fingerprint)
}

// testBackendReseal: Reseal replaces a done record's result and nothing
// else, and only with the record's token (backends that implement
// backend.Resealer).
func testBackendReseal(t *testing.T, nb source) {
	b := nb.open(t)
	closeBackend(t, b)
	rs, ok := b.(backend.Resealer)
	if !ok {
		t.Skip("the backend does not implement backend.Resealer")
	}
	now := epoch
	rec, _, err := b.Claim(ctx, "s", "k", args("fp", now))
	require.NoError(t, err)
	require.ErrorIs(t, rs.Reseal(ctx, "s", "k", rec.Token, okResult("x")), backend.ErrFenced, "in progress")
	require.ErrorIs(t, rs.Reseal(ctx, "s", "absent", 1, okResult("x")), backend.ErrFenced, "absent")
	require.NoError(t, b.Complete(ctx, "s", "k", rec.Token, backend.Completion{Result: okResult("old"),
		At: now, ExpiresAt: now.Add(retention), Ending: backend.Ending{At: now, Outcome: "completed", Status: 200}}))
	before, err := b.Get(ctx, "s", "k")
	require.NoError(t, err)
	require.ErrorIs(t, rs.Reseal(ctx, "s", "k", rec.Token+1, okResult("x")), backend.ErrFenced, "another token")
	require.NoError(t, rs.Reseal(ctx, "s", "k", rec.Token, okResult("new")))
	after, err := b.Get(ctx, "s", "k")
	require.NoError(t, err)
	require.Equal(t, "new", string(after.Result.Body))
	after.Result = before.Result
	require.Equal(t, before, after, "Reseal changed more than the result")
}
