package idemtest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/stretchr/testify/require"
)

// One test per row of the contract table.

func testContractClaimAbsent(t *testing.T, nb source) {
	e := newEnv(t, nb)
	r := req("refund-1", "fp-a")
	c := e.claim(r)
	require.Equal(t, "refund-1", c.Key())
	require.Equal(t, "tenant-a", c.Scope())
	require.NotZero(t, c.Token())
	require.True(t, c.LeaseEnds().Equal(epoch.Add(lease)))
	rec := e.get(r)
	require.Equal(t, backend.StateInProgress, rec.State)
	require.Equal(t, c.Token(), rec.Token)
	require.NoError(t, c.Complete(ctx, okResult(`{"refund":"r1"}`)))
	require.ErrorIs(t, c.Complete(ctx, okResult(`{}`)), idem.ErrClaimDone)
}

func testContractInProgress(t *testing.T, nb source) {
	e := newEnv(t, nb)
	r := req("k", "fp-a")
	c := e.claim(r)
	e.clk.Advance(lease / 2)
	_, _, err := e.store.Begin(ctx, r)
	require.ErrorIs(t, err, idem.ErrInProgress)
	var ip *idem.InProgressError
	require.True(t, errors.As(err, &ip))
	require.True(t, ip.LeaseEnds.Equal(c.LeaseEnds()))
	require.Equal(t, lease/2, ip.RetryAfter(e.clk.Now()))
	require.Equal(t, time.Second, ip.RetryAfter(c.LeaseEnds()), "Retry-After is at least a second")

	// Do does not run fn for a key in progress.
	ran := false
	_, _, err = e.store.Do(ctx, r, func(context.Context) (backend.Result, error) { ran = true; return backend.Result{}, nil })
	require.ErrorIs(t, err, idem.ErrInProgress)
	require.False(t, ran)
	require.Equal(t, 2, e.events.count(idem.EventInProgress, "k"))
}

func testContractReplay(t *testing.T, nb source) {
	e := newEnv(t, nb)
	r := req("k", "fp-a")
	runs := 0
	fn := func(context.Context) (backend.Result, error) {
		runs++
		return okResult(`{"n":1}`), nil
	}
	res, replayed, err := e.store.Do(ctx, r, fn)
	require.NoError(t, err)
	require.False(t, replayed)
	require.Equal(t, `{"n":1}`, string(res.Body))
	for range 3 {
		e.clk.Advance(time.Minute)
		res, replayed, err = e.store.Do(ctx, r, fn)
		require.NoError(t, err)
		require.True(t, replayed)
		require.Equal(t, 200, res.Status)
		require.Equal(t, `{"n":1}`, string(res.Body))
		require.Equal(t, []string{"application/json"}, res.Header["Content-Type"])
	}
	require.Equal(t, 1, runs)
	saved := e.replay(r)
	require.Equal(t, `{"n":1}`, string(saved.Body))
	require.Equal(t, 4, e.events.count(idem.EventReplayed, "k"))
}

func testContractMismatch(t *testing.T, nb source) {
	e := newEnv(t, nb)
	// In progress with another fingerprint.
	c := e.claim(req("k", "fp-a"))
	_, _, err := e.store.Begin(ctx, req("k", "fp-b"))
	var me *idem.MismatchError
	require.ErrorIs(t, err, idem.ErrMismatch)
	require.True(t, errors.As(err, &me))
	require.Equal(t, "fp-a", me.Stored)
	require.Equal(t, "fp-b", me.Got)
	require.Equal(t, "k", me.Key)
	// Done with another fingerprint.
	require.NoError(t, c.Complete(ctx, okResult("x")))
	ran := false
	_, _, err = e.store.Do(ctx, req("k", "fp-b"), func(context.Context) (backend.Result, error) { ran = true; return backend.Result{}, nil })
	require.ErrorIs(t, err, idem.ErrMismatch)
	require.False(t, ran)
	// Stale with another fingerprint: mismatch, and the resolver is not asked.
	res := answer(idem.VerdictNotCommitted, backend.Result{})
	e2 := newEnv(t, nb, withResolver(res))
	e2.claim(req("k", "fp-a"))
	e2.clk.Advance(2 * lease)
	_, _, err = e2.store.Begin(ctx, req("k", "fp-b"))
	require.ErrorIs(t, err, idem.ErrMismatch)
	require.Zero(t, res.n())
	require.Equal(t, 2, e.events.count(idem.EventMismatch, "k"))
	require.Equal(t, 1, e2.events.count(idem.EventMismatch, "k"))
}

func testContractInvalidKey(t *testing.T, nb source) {
	e := newEnv(t, nb)
	bad := []idem.Request{
		{Key: ""},
		{Key: strings.Repeat("k", backend.MaxKeyLen+1)},
		{Key: "tab\tkey"},
		{Key: "nul\x00"},
		{Key: "caf\u00e9"},
		{Key: "del\x7f"},
		{Key: "ok", Scope: strings.Repeat("s", backend.MaxScopeLen+1)},
		{Key: "ok", Scope: "bad\nscope"},
		{Key: "ok", Scope: "\xff\xfe"},
	}
	for _, r := range bad {
		_, _, err := e.store.Begin(ctx, r)
		require.ErrorIs(t, err, backend.ErrInvalidKey, "%q/%q", r.Scope, r.Key)
		ran := false
		_, _, err = e.store.Do(ctx, r, func(context.Context) (backend.Result, error) { ran = true; return backend.Result{}, nil })
		require.ErrorIs(t, err, backend.ErrInvalidKey)
		require.False(t, ran)
		_, err = e.store.Get(ctx, r.Scope, r.Key)
		require.ErrorIs(t, err, backend.ErrInvalidKey)
	}
	good := []string{"a", strings.Repeat("k", backend.MaxKeyLen), " spaces and ~punctuation! ", "550e8400-e29b-41d4-a716-446655440000"}
	for _, k := range good {
		e.claim(idem.Request{Key: k, Fingerprint: "fp"})
	}
}

func testContractUnavailable(t *testing.T, nb source) {
	var f *failing
	e := newEnv(t, nb.wrap(func(t testing.TB) backend.Backend {
		f = &failing{Backend: nb.open(t)}
		return f
	}))
	f.set(true)
	ran := false
	_, _, err := e.store.Do(ctx, req("k", "fp"), func(context.Context) (backend.Result, error) { ran = true; return backend.Result{}, nil })
	require.True(t, isUnavailable(err), "got %v", err)
	require.False(t, ran, "the effect ran although the claim could not be stored")
	f.set(false)

	// The result cannot be saved: the effect ran, so the error says its
	// outcome was not recorded (never "unavailable", which means it did
	// not run), and the claim stays for recovery rather than being
	// forgotten.
	c := e.claim(req("k2", "fp"))
	f.set(true)
	err = c.Complete(ctx, okResult("x"))
	requireNotRecorded(t, err)
	f.set(false)
	rec := e.get(req("k2", "fp"))
	require.Equal(t, backend.StateInProgress, rec.State)

	_, _, err = e.store.Do(ctx, req("k3", "fp"), func(context.Context) (backend.Result, error) {
		f.set(true)
		return okResult("y"), nil
	})
	requireNotRecorded(t, err)
	f.set(false)
	require.Equal(t, backend.StateInProgress, e.get(req("k3", "fp")).State)
}

func testContractClosed(t *testing.T, nb source) {
	e := newEnv(t, nb)
	require.NoError(t, e.store.Close())
	require.NoError(t, e.store.Close(), "Close twice is fine")
	_, _, err := e.store.Begin(ctx, req("k", "fp"))
	require.ErrorIs(t, err, backend.ErrClosed)
	_, _, err = e.store.Do(ctx, req("k", "fp"), func(context.Context) (backend.Result, error) { return backend.Result{}, nil })
	require.ErrorIs(t, err, backend.ErrClosed)
	_, err = e.store.Get(ctx, "tenant-a", "k")
	require.ErrorIs(t, err, backend.ErrClosed)
	_, err = e.store.Sweep(ctx)
	require.ErrorIs(t, err, backend.ErrClosed)
}

func testContractExpired(t *testing.T, nb source) {
	e := newEnv(t, nb)
	r := req("k", "fp-a")
	runs := 0
	fn := func(context.Context) (backend.Result, error) { runs++; return okResult("r"), nil }
	_, _, err := e.store.Do(ctx, r, fn)
	require.NoError(t, err)
	e.clk.Advance(retention - time.Nanosecond)
	_, replayed, err := e.store.Do(ctx, r, fn)
	require.NoError(t, err)
	require.True(t, replayed, "replayed until the retention ends")
	e.clk.Advance(time.Nanosecond)
	_, replayed, err = e.store.Do(ctx, r, fn)
	require.NoError(t, err)
	require.False(t, replayed, "a request after expiry runs again")
	require.Equal(t, 2, runs)
	// After expiry a different payload is a new request, not a mismatch.
	e.clk.Advance(retention)
	_, replayed, err = e.store.Do(ctx, req("k", "fp-b"), fn)
	require.NoError(t, err)
	require.False(t, replayed)
	require.Equal(t, 3, runs)
}

func testFencing(t *testing.T, nb source) {
	e := newEnv(t, nb, withResolver(answer(idem.VerdictNotCommitted, backend.Result{})))
	r := req("k", "fp")
	slow := e.claim(r)
	e.clk.Advance(lease + time.Second)
	// The slow worker's lease ended; a retry recovers the claim (not
	// committed) and takes it over.
	fresh := e.claim(r)
	require.NotEqual(t, slow.Token(), fresh.Token())

	require.ErrorIs(t, slow.Extend(ctx), backend.ErrFenced)
	require.ErrorIs(t, slow.Complete(ctx, okResult("stale")), backend.ErrFenced)
	require.ErrorIs(t, slow.Release(ctx, "late"), idem.ErrClaimDone)
	require.NoError(t, fresh.Complete(ctx, okResult("fresh")))
	require.Equal(t, "fresh", string(e.replay(r).Body))

	// A slow worker whose claim was held for recovery and resolved as
	// committed cannot overwrite the recovered result either.
	e2 := newEnv(t, nb, withResolver(answer(idem.VerdictCommitted, okResult("downstream"))))
	slow2 := e2.claim(r)
	e2.clk.Advance(lease + time.Second)
	require.Equal(t, "downstream", string(e2.replay(r).Body))
	require.ErrorIs(t, slow2.Complete(ctx, okResult("late")), backend.ErrFenced)
	require.Equal(t, "downstream", string(e2.replay(r).Body))
	require.GreaterOrEqual(t, e2.events.count(idem.EventFenced, "k"), 1)
}

func testTokensNeverRepeat(t *testing.T, nb source) {
	e := newEnv(t, nb)
	seen := map[uint64]bool{}
	for i := range 50 {
		r := req(keyN("k", i%5), "fp")
		c := e.claim(r)
		require.False(t, seen[c.Token()], "token %d repeated", c.Token())
		seen[c.Token()] = true
		require.NoError(t, c.Release(ctx, "again"))
	}
}

func testLeaseEnds(t *testing.T, nb source) {
	e := newEnv(t, nb)
	r := req("k", "fp")
	e.claim(r)
	e.clk.Advance(lease - time.Nanosecond)
	_, _, err := e.store.Begin(ctx, r)
	require.ErrorIs(t, err, idem.ErrInProgress)
	e.clk.Advance(time.Nanosecond)
	_, _, err = e.store.Begin(ctx, r)
	require.ErrorIs(t, err, idem.ErrOutcomeUnknown, "a stale claim with no resolver is reported, never run again")
	require.True(t, e.get(r).Stale(e.clk.Now()))
}

func testHeartbeat(t *testing.T, nb source) {
	e := newEnv(t, nb)
	r := req("k", "fp")
	ch := e.events.subscribe()
	res, replayed, err := e.store.Do(ctx, r, func(fctx context.Context) (backend.Result, error) {
		// Run for ten leases: the heartbeat must keep the claim live.
		for range 30 {
			e.clk.BlockUntil(1)
			e.clk.Advance(lease/3 + time.Millisecond)
			waitFor(t, ch, idem.EventExtended)
			_, _, err := e.store.Begin(ctx, r)
			require.ErrorIs(t, err, idem.ErrInProgress, "the claim looked stale while its holder was alive")
		}
		require.NoError(t, fctx.Err())
		return okResult("long"), nil
	})
	require.NoError(t, err)
	require.False(t, replayed)
	require.Equal(t, "long", string(res.Body))
	require.Equal(t, "long", string(e.replay(r).Body))
	require.GreaterOrEqual(t, e.events.count(idem.EventExtended, "k"), 30)
}

func testExtend(t *testing.T, nb source) {
	e := newEnv(t, nb)
	r := req("k", "fp")
	c := e.claim(r)
	e.clk.Advance(lease - time.Second)
	require.NoError(t, c.Extend(ctx))
	require.True(t, c.LeaseEnds().Equal(e.clk.Now().Add(lease)))
	e.clk.Advance(lease - time.Second)
	_, _, err := e.store.Begin(ctx, r)
	require.ErrorIs(t, err, idem.ErrInProgress)
	require.True(t, e.get(r).LeaseEnds.Equal(c.LeaseEnds()))
	require.NoError(t, c.Complete(ctx, okResult("x")))
	require.ErrorIs(t, c.Extend(ctx), idem.ErrClaimDone)
}

func testRetentionOverride(t *testing.T, nb source) {
	e := newEnv(t, nb)
	short := req("short", "fp")
	short.Retention = time.Minute
	_, _, err := e.store.Do(ctx, short, func(context.Context) (backend.Result, error) { return okResult("s"), nil })
	require.NoError(t, err)
	long := req("long", "fp")
	_, _, err = e.store.Do(ctx, long, func(context.Context) (backend.Result, error) { return okResult("l"), nil })
	require.NoError(t, err)
	require.True(t, e.get(short).ExpiresAt.Equal(epoch.Add(time.Minute)))
	require.True(t, e.get(long).ExpiresAt.Equal(epoch.Add(retention)))
	e.clk.Advance(time.Minute)
	e.claim(short)
	e.replay(long)
}

func testRetentionSweep(t *testing.T, nb source) {
	e := newEnv(t, nb)
	for i := range 20 {
		_, _, err := e.store.Do(ctx, req(keyN("k", i), "fp"), func(context.Context) (backend.Result, error) { return okResult("r"), nil })
		require.NoError(t, err)
	}
	open := e.claim(req("open", "fp"))
	rep, err := e.store.Sweep(ctx)
	require.NoError(t, err)
	require.Zero(t, rep.Expired)
	e.clk.Advance(retention)
	require.NoError(t, open.Extend(ctx))
	rep, err = e.store.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 20, rep.Expired)
	for i := range 20 {
		_, err := e.store.Get(ctx, "tenant-a", keyN("k", i))
		require.ErrorIs(t, err, backend.ErrNotFound)
	}
	require.Equal(t, 20, e.events.count(idem.EventExpired, ""))
	require.Equal(t, backend.StateInProgress, e.get(req("open", "fp")).State)
}

func testScopeIsolation(t *testing.T, nb source) {
	e := newEnv(t, nb)
	scopes := []string{"", "a", "ab", "tenant-\u00e9", "tenant-a"}
	keys := []string{"c", "bc", "k"}
	for _, s := range scopes {
		for _, k := range keys {
			r := idem.Request{Scope: s, Key: k, Fingerprint: "fp"}
			out, replayed, err := e.store.Do(ctx, r, func(context.Context) (backend.Result, error) {
				return okResult(s + "|" + k), nil
			})
			require.NoError(t, err)
			require.False(t, replayed, "scope %q key %q was answered from another scope", s, k)
			require.Equal(t, s+"|"+k, string(out.Body))
		}
	}
	for _, s := range scopes {
		for _, k := range keys {
			got := e.replay(idem.Request{Scope: s, Key: k, Fingerprint: "fp"})
			require.Equal(t, s+"|"+k, string(got.Body))
		}
	}
	// A different fingerprint in another scope is no mismatch.
	e.claim(idem.Request{Scope: "other", Key: "k", Fingerprint: "fp-z"})
}

func testRace(t *testing.T, nb source) {
	e := newEnv(t, nb)
	rounds := 30
	if testing.Short() {
		rounds = 10
	}
	for round := range rounds {
		r := req(keyN("race", round), "fp")
		var runs atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make(chan error, 64)
		for range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				out, replayed, err := e.store.Do(ctx, r, func(context.Context) (backend.Result, error) {
					runs.Add(1)
					return okResult("winner"), nil
				})
				switch {
				case err == nil && (replayed || string(out.Body) == "winner"):
				case errors.Is(err, idem.ErrInProgress):
				default:
					errs <- err
				}
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: %v", round, err)
		}
		require.Equal(t, int32(1), runs.Load(), "round %d: the effect ran %d times", round, runs.Load())
		require.Equal(t, "winner", string(e.replay(r).Body))
	}
}

func testCloseDrains(t *testing.T, nb source) {
	e := newEnv(t, nb, func(o *idem.Options) { o.CloseTimeout = time.Hour })
	started := make(chan struct{})
	release := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, _, err := e.store.Do(ctx, req("k", "fp"), func(context.Context) (backend.Result, error) {
			close(started)
			<-release
			return okResult("finished"), nil
		})
		done <- err
	}()
	<-started
	closed := make(chan error, 1)
	go func() { closed <- e.store.Close() }()
	// New requests are refused while Close drains. A claim won before Close
	// began is released at once, so that Close need not wait for it.
	for i := 0; ; i++ {
		c, _, err := e.store.Begin(ctx, req(keyN("other", i), "fp"))
		if errors.Is(err, backend.ErrClosed) {
			break
		}
		require.NoError(t, err)
		require.NoError(t, c.Release(ctx, "test"))
	}
	close(release)
	require.NoError(t, <-done, "an effect running when Close began must be recorded")
	require.NoError(t, <-closed)
}

func testObserver(t *testing.T, nb source) {
	e := newEnv(t, nb, withResolver(answer(idem.VerdictNotCommitted, backend.Result{})))
	r := req("k", "fp")
	c := e.claim(r)
	_, _, _ = e.store.Begin(ctx, r)
	_, _, _ = e.store.Begin(ctx, req("k", "other"))
	require.NoError(t, c.Extend(ctx))
	require.NoError(t, c.Complete(ctx, okResult("x")))
	e.replay(r)
	r2 := req("k2", "fp")
	c2 := e.claim(r2)
	require.NoError(t, c2.Release(ctx, "why not"))
	c3 := e.claim(r2)
	require.NoError(t, c3.Hold(ctx))
	e.clk.Advance(e.store.Options().RecoveryGrace)
	e.claim(r2) // recovers (not committed) and claims again
	e.clk.Advance(retention + lease)
	_, err := e.store.Sweep(ctx)
	require.NoError(t, err)
	for _, kind := range []idem.EventKind{idem.EventClaimed, idem.EventInProgress, idem.EventMismatch,
		idem.EventExtended, idem.EventCompleted, idem.EventReplayed, idem.EventReleased, idem.EventHeld,
		idem.EventStale, idem.EventRecovered, idem.EventExpired} {
		require.NotZero(t, e.events.count(kind, ""), "no %s event", kind)
	}
	e.events.mu.Lock()
	defer e.events.mu.Unlock()
	for _, ev := range e.events.list {
		require.NotEmpty(t, ev.Key, "%s event without a key", ev.Kind)
		require.Equal(t, "tenant-a", ev.Scope)
		require.False(t, ev.Time.IsZero())
		if ev.Kind != idem.EventError {
			require.NotZero(t, ev.Token, "%s event without a token", ev.Kind)
		}
	}
}

func testStory(t *testing.T, nb source) {
	res := answer(idem.VerdictCommitted, okResult("ledger"))
	e := newEnv(t, nb, withResolver(res))
	r := req("k", "fp")
	c := e.claim(r)
	first := c.Token()
	require.NoError(t, c.Release(ctx, "transient"))
	e.clk.Advance(time.Minute)
	c = e.claim(r)
	e.clk.Advance(time.Second)
	require.NoError(t, c.Complete(ctx, backend.Result{Status: 201, Body: []byte("x")}))
	rec := e.get(r)
	require.Equal(t, 2, rec.Claims)
	require.True(t, rec.FirstSeen.Equal(epoch))
	require.True(t, rec.ClaimedAt.Equal(epoch.Add(time.Minute)))
	require.True(t, rec.DoneAt.Equal(epoch.Add(time.Minute+time.Second)))
	require.Equal(t, c.Token(), rec.Token)
	require.Len(t, rec.Attempts, 2)
	a0, a1 := rec.Attempts[0], rec.Attempts[1]
	require.Equal(t, first, a0.Token)
	require.True(t, a0.ClaimedAt.Equal(epoch))
	require.True(t, a0.EndedAt.Equal(epoch))
	require.Equal(t, "released", a0.Outcome)
	require.Equal(t, "transient", a0.Reason)
	require.Equal(t, c.Token(), a1.Token)
	require.True(t, a1.ClaimedAt.Equal(epoch.Add(time.Minute)))
	require.True(t, a1.EndedAt.Equal(epoch.Add(time.Minute+time.Second)))
	require.Equal(t, "completed", a1.Outcome)
	require.Equal(t, 201, a1.Status)

	// Replays and rejections are counted off the request path, and reach
	// the record by the next sweep at the latest.
	for range 3 {
		e.clk.Advance(time.Second)
		e.replay(r)
	}
	_, _, err := e.store.Begin(ctx, req("k", "other"))
	require.ErrorIs(t, err, idem.ErrMismatch)
	lastReplay := e.clk.Now()
	e.clk.Advance(time.Second)
	_, _, err = e.store.Begin(ctx, req("k", "other"))
	require.ErrorIs(t, err, idem.ErrMismatch)
	_, err = e.store.Sweep(ctx)
	require.NoError(t, err)
	rec = e.get(r)
	require.Equal(t, int64(3), rec.Replays)
	require.True(t, rec.LastReplay.Equal(lastReplay))
	require.Equal(t, int64(2), rec.Mismatches)
	require.True(t, rec.LastRejection.Equal(e.clk.Now()))

	// A conflict (409), and a claim ended by recovery.
	r2 := req("k2", "fp")
	held := e.claim(r2)
	_, _, err = e.store.Begin(ctx, r2)
	require.ErrorIs(t, err, idem.ErrInProgress)
	e.clk.Advance(lease)
	require.Equal(t, "ledger", string(e.replay(r2).Body))
	_, err = e.store.Sweep(ctx)
	require.NoError(t, err)
	rec = e.get(r2)
	require.Equal(t, int64(1), rec.Conflicts)
	require.Equal(t, int64(1), rec.Replays)
	require.Len(t, rec.Attempts, 1)
	require.Equal(t, held.Token(), rec.Attempts[0].Token)
	require.Equal(t, "recovered: committed", rec.Attempts[0].Outcome)
	require.Equal(t, 200, rec.Attempts[0].Status)
}

func testStoryBounded(t *testing.T, nb source) {
	e := newEnv(t, nb)
	r := req("k", "fp")
	var tokens []uint64
	for range backend.KeptAttempts + 5 {
		c := e.claim(r)
		tokens = append(tokens, c.Token())
		require.NoError(t, c.Release(ctx, "again"))
	}
	rec := e.get(r)
	require.Len(t, rec.Attempts, backend.KeptAttempts, "the story is bounded")
	require.Equal(t, tokens[0], rec.Attempts[0].Token, "the first claim is kept")
	require.Equal(t, tokens[len(tokens)-1], rec.Attempts[backend.KeptAttempts-1].Token, "and the latest")
	require.Equal(t, backend.KeptAttempts+5, rec.Claims)
}
