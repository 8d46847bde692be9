package idemtest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/stretchr/testify/require"
)

// testBackendEnding: a backend stores the Ending the Store gives as it is,
// so the story reads the same on every backend.
func testBackendEnding(t *testing.T, nb source) {
	b := nb.open(t)
	closeBackend(t, b)
	rec, _, err := b.Claim(ctx, "s", "k", args("fp", epoch))
	require.NoError(t, err)
	at := epoch.Add(time.Second)
	require.NoError(t, b.Release(ctx, "s", "k", rec.Token, backend.Releasing{At: at, ExpiresAt: at.Add(retention),
		Reason: "r", Ending: backend.Ending{At: at.Add(1), Outcome: "outcome one", Reason: "reason one", Status: 7}}))
	next, claimed, err := b.Claim(ctx, "s", "k", args("fp", at))
	require.NoError(t, err)
	require.True(t, claimed)
	require.NoError(t, b.Complete(ctx, "s", "k", next.Token, backend.Completion{Result: okResult("x"), At: at,
		ExpiresAt: at.Add(retention), Ending: backend.Ending{At: at.Add(2), Outcome: "outcome two", Status: 9}}))
	got, err := b.Get(ctx, "s", "k")
	require.NoError(t, err)
	require.Len(t, got.Attempts, 2)
	a0, a1 := got.Attempts[0], got.Attempts[1]
	require.True(t, a0.EndedAt.Equal(at.Add(1)))
	require.Equal(t, "outcome one", a0.Outcome)
	require.Equal(t, "reason one", a0.Reason)
	require.Equal(t, 7, a0.Status)
	require.True(t, a1.EndedAt.Equal(at.Add(2)))
	require.Equal(t, "outcome two", a1.Outcome)
	require.Empty(t, a1.Reason, "an empty reason adds none")
	require.Equal(t, 9, a1.Status, "the Ending's status, not the result's")
}

// claimCounter counts a backend's Claim calls: every Begin the Store does
// not answer from its replay cache makes one. The claim of a Store's
// encryption marker, made once, is not counted.
type claimCounter struct {
	backend.Backend
	n atomic.Int64
}

func (c *claimCounter) Claim(ctx context.Context, scope, key string, a backend.ClaimArgs) (*backend.Record, bool, error) {
	if scope != idem.EncryptionScope {
		c.n.Add(1)
	}
	return c.Backend.Claim(ctx, scope, key, a)
}

// testReplayCache: the Store answers replays of done records it completed
// or read without a backend call, on every backend, never past their
// expiry, and hands out results the caller's later changes do not reach.
func testReplayCache(t *testing.T, nb source) {
	var inner backend.Backend
	cc := &claimCounter{}
	e := newEnv(t, nb.wrap(func(t testing.TB) backend.Backend {
		inner = nb.open(t)
		cc.Backend = inner
		return cc
	}))
	r := req("k", "fp")
	res := okResult("first")
	require.NoError(t, e.claim(r).Complete(ctx, res))
	res.Body[0] = 'X'
	require.Equal(t, int64(1), cc.n.Load())
	for range 3 {
		require.Equal(t, "first", string(e.replay(r).Body), "a replay sees what was completed")
	}
	require.Equal(t, int64(1), cc.n.Load(), "replays of a record this store completed make no backend call")

	_, _, err := e.store.Begin(ctx, req("k", "other"))
	require.ErrorIs(t, err, idem.ErrMismatch)
	require.Equal(t, int64(2), cc.n.Load(), "a mismatch is decided by the backend's record")

	// A done record stored by someone else is read once or twice (the
	// cache admits a key read from the backend on its second read, or on
	// its first when the doorkeeper's bit was set by another key), then
	// cached.
	pre, _, err := inner.Claim(ctx, "tenant-a", "pre", args("fp", e.clk.Now()))
	require.NoError(t, err)
	require.NoError(t, inner.Complete(ctx, "tenant-a", "pre", pre.Token, backend.Completion{Result: okResult("pre"),
		At: e.clk.Now(), ExpiresAt: e.clk.Now().Add(retention)}))
	for range 4 {
		require.Equal(t, "pre", string(e.replay(req("pre", "fp")).Body))
	}
	read := cc.n.Load()
	require.True(t, read == 3 || read == 4, "a record read from the backend is cached from its second read: %d backend reads", read-2)

	// Expiry is judged on the store's clock at every replay.
	e.clk.Advance(retention - time.Nanosecond)
	require.Equal(t, "first", string(e.replay(r).Body))
	require.Equal(t, read, cc.n.Load())
	e.clk.Advance(time.Nanosecond)
	c := e.claim(r)
	require.Equal(t, read+1, cc.n.Load(), "an expired record is not served from the cache")
	require.NoError(t, c.Complete(ctx, okResult("second")))
	require.Equal(t, "second", string(e.replay(r).Body))

	// What Sweep reclaims is gone from the cache too: the key runs again.
	e.clk.Advance(retention)
	rep, err := e.store.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, rep.Expired)
	e.claim(req("pre", "fp"))
}

// testReplayCacheRecovery: a result saved by recovery is cached like one
// completed by its holder.
func testReplayCacheRecovery(t *testing.T, nb source) {
	cc := &claimCounter{}
	e := newEnv(t, nb.wrap(func(t testing.TB) backend.Backend { cc.Backend = nb.open(t); return cc }),
		withResolver(answer(idem.VerdictCommitted, okResult("downstream"))))
	r := req("k", "fp")
	e.claim(r)
	e.clk.Advance(lease + time.Second)
	require.Equal(t, "downstream", string(e.replay(r).Body))
	n := cc.n.Load()
	require.Equal(t, "downstream", string(e.replay(r).Body))
	require.Equal(t, n, cc.n.Load(), "the recovered result is replayed from the cache")
}
