package idem_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/badgerstore"
	"github.com/idemkit/idem/idemtest"
	"github.com/stretchr/testify/require"
)

// sharedBackend lets two Stores, standing for two instances, share one
// backend: only the test closes it.
type sharedBackend struct{ backend.Backend }

func (sharedBackend) Close() error { return nil }

// graceStores returns two Stores on one backend and fake clock, owned by
// "a" and "b"; b has the Resolver, which counts its calls.
func graceStores(t *testing.T, clock *idemtest.Clock, grace time.Duration) (a, b *idem.Store, asked *atomic.Int32) {
	t.Helper()
	bk, err := badgerstore.Open("", badgerstore.Options{InMemory: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = bk.Close() })
	asked = new(atomic.Int32)
	resolver := idem.ResolverFunc(func(context.Context, *idem.Record) (idem.Resolution, error) {
		asked.Add(1)
		return idem.Resolution{Verdict: idem.VerdictNotCommitted}, nil
	})
	open := func(owner string) *idem.Store {
		s := idem.New(sharedBackend{bk}, &idem.Options{Clock: clock, Lease: testLease, SweepInterval: -1,
			Owner: owner, Resolver: resolver, RecoveryGrace: grace})
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	return open("a"), open("b"), asked
}

func TestRecoveryGrace_OtherInstanceWaitsLeasePlusGrace(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	clock := idemtest.NewClock(start)
	const grace = 20 * time.Second
	a, b, asked := graceStores(t, clock, grace)
	req := idem.Request{Key: "k", Fingerprint: "fp"}
	ctx := context.Background()
	c, _, err := a.Begin(ctx, req)
	require.NoError(t, err)
	require.NotNil(t, c)

	clock.Advance(testLease) // a's lease ended: a may only be paused
	rep, err := b.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Unresolved)
	require.Zero(t, asked.Load())
	_, _, err = b.Begin(ctx, req)
	var unk *idem.OutcomeUnknownError
	require.True(t, errors.As(err, &unk), "%v", err)
	require.True(t, start.Add(testLease+grace).Equal(unk.NextCheck), unk.NextCheck)
	require.Zero(t, asked.Load())

	clock.Advance(grace)
	rep, err = b.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.NotCommitted)
	require.Equal(t, int32(1), asked.Load())
	require.ErrorIs(t, c.Complete(ctx, idem.Result{}), idem.ErrFenced)
}

// The instance that took the claim knows it is not paused (its sweep runs
// in the same process): it asks the Resolver as soon as the lease ended.
func TestRecoveryGrace_OwnClaimsDoNotWait(t *testing.T) {
	clock := idemtest.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	ctx := context.Background()
	_, b, asked := graceStores(t, clock, time.Hour)
	c, _, err := b.Begin(ctx, idem.Request{Key: "k", Fingerprint: "fp"})
	require.NoError(t, err)
	require.NotNil(t, c)
	clock.Advance(testLease)
	rep, err := b.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.NotCommitted)
	require.Equal(t, int32(1), asked.Load())
	require.ErrorIs(t, c.Complete(ctx, idem.Result{}), idem.ErrFenced)
}

// holdingBackend is a sharedBackend that keeps the note of a held claim
// in its attempt (backend.Holder), as every shipped backend does.
type holdingBackend struct {
	sharedBackend
	backend.Holder
}

// A claim its own instance held (an ambiguous outcome: a write whose answer
// never came may still be held in the network) waits the grace like
// another instance's, on a backend that keeps the hold's note and on one
// that does not (the Store remembers it); an unheld claim of the same
// instance still does not wait.
func TestRecoveryGrace_OwnHeldClaimsWait(t *testing.T) {
	for _, holder := range []bool{true, false} {
		name := "memory note"
		if holder {
			name = "backend.Holder"
		}
		t.Run(name, func(t *testing.T) {
			start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
			clock := idemtest.NewClock(start)
			ctx := context.Background()
			const grace = 2 * testLease
			bk, err := badgerstore.Open("", badgerstore.Options{InMemory: true})
			require.NoError(t, err)
			t.Cleanup(func() { _ = bk.Close() })
			var b backend.Backend = sharedBackend{bk}
			if holder {
				b = holdingBackend{sharedBackend{bk}, bk}
			}
			var asked atomic.Int32
			s := idem.New(b, &idem.Options{Clock: clock, Lease: testLease, SweepInterval: -1, Owner: "a",
				RecoveryGrace: grace, Resolver: idem.ResolverFunc(func(context.Context, *idem.Record) (idem.Resolution, error) {
					asked.Add(1)
					return idem.Resolution{Verdict: idem.VerdictNotCommitted}, nil
				})})
			t.Cleanup(func() { _ = s.Close() })

			held, _, err := s.Begin(ctx, idem.Request{Key: "held", Fingerprint: "fp"})
			require.NoError(t, err)
			require.NoError(t, held.Hold(ctx))
			open, _, err := s.Begin(ctx, idem.Request{Key: "open", Fingerprint: "fp"})
			require.NoError(t, err)
			require.NotNil(t, open)

			clock.Advance(testLease)
			rep, err := s.Sweep(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, rep.NotCommitted, "the unheld claim, at once")
			require.Equal(t, 1, rep.Unresolved, "the held claim, within its grace")
			require.Equal(t, int32(1), asked.Load())
			require.ErrorIs(t, open.Release(ctx, "done"), idem.ErrFenced)
			_, _, err = s.Begin(ctx, idem.Request{Key: "held", Fingerprint: "fp"})
			var unk *idem.OutcomeUnknownError
			require.True(t, errors.As(err, &unk), "%v", err)
			require.True(t, start.Add(grace).Equal(unk.NextCheck), "the grace runs from the hold: %v", unk.NextCheck)

			clock.Advance(grace - testLease)
			rep, err = s.Sweep(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, rep.NotCommitted)
			require.Equal(t, int32(2), asked.Load())
			rec, err := s.Get(ctx, "", "held")
			require.NoError(t, err)
			require.Equal(t, idem.StateReleased, rec.State)
			require.Contains(t, rec.Recovered, "held", "the story keeps why it was held")
		})
	}
}

func TestRecoveryGrace_DefaultIsLease_NegativeIsNone(t *testing.T) {
	clock := idemtest.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	a, b, _ := graceStores(t, clock, 0)
	require.Equal(t, testLease, a.Options().RecoveryGrace)
	require.Equal(t, testLease, b.Options().RecoveryGrace)

	ctx := context.Background()
	a, b, asked := graceStores(t, clock, -1)
	require.Zero(t, b.Options().RecoveryGrace)
	c, _, err := a.Begin(ctx, idem.Request{Key: "k", Fingerprint: "fp"})
	require.NoError(t, err)
	require.NotNil(t, c)
	clock.Advance(testLease)
	rep, err := b.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.NotCommitted)
	require.Equal(t, int32(1), asked.Load())
	require.ErrorIs(t, c.Complete(ctx, idem.Result{}), idem.ErrFenced)
}

// An effect that ran while its claim was recovered (its holder paused past
// the lease) cannot save its result: Do says the effect ran unrecorded.
func TestDo_LateCompletion_ReportsEffectRan(t *testing.T) {
	ctx := context.Background()
	clock := idemtest.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	a, b, _ := graceStores(t, clock, -1)
	running, resume := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, _, err := a.Do(ctx, idem.Request{Key: "k", Fingerprint: "fp"}, func(context.Context) (idem.Result, error) {
			close(running)
			<-resume // paused: ignores its context
			return idem.Result{Status: 201}, nil
		})
		done <- err
	}()
	<-running
	clock.Advance(testLease)
	rep, err := b.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.NotCommitted)
	close(resume)
	err = <-done
	var late *idem.LateCompletionError
	require.True(t, errors.As(err, &late), "%v", err)
	require.Equal(t, "k", late.Key)
	require.NotZero(t, late.Token)
	require.ErrorIs(t, err, idem.ErrFenced)
}
