package idem_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/badgerstore"
	"github.com/idemkit/idem/idemtest"
	"github.com/stretchr/testify/require"
)

// extendFails is a Badger backend whose Extend fails with err, telling
// tried about every call.
type extendFails struct {
	backend.Backend
	err   error
	tried chan struct{}
}

func (b *extendFails) Extend(context.Context, string, string, uint64, time.Time) error {
	select {
	case b.tried <- struct{}{}:
	default:
	}
	return b.err
}

const testLease = 30 * time.Second

// leaseStore is a Store on a fake clock with no background sweep; extend,
// when not nil, replaces the backend's Extend.
func leaseStore(t *testing.T, clock *idemtest.Clock, extend error, o idem.Options) (*idem.Store, chan struct{}) {
	t.Helper()
	b, err := badgerstore.Open("", badgerstore.Options{InMemory: true})
	require.NoError(t, err)
	var backend backend.Backend = b
	tried := make(chan struct{}, 16)
	if extend != nil {
		backend = &extendFails{Backend: b, err: extend, tried: tried}
	}
	o.Clock, o.Lease, o.SweepInterval = clock, testLease, -1
	s := idem.New(backend, &o)
	t.Cleanup(func() { _ = s.Close() })
	return s, tried
}

// runHeld runs Do in the background with an effect that hands its context
// out and returns ctx.Err() once release is closed or ctx is done.
func runHeld(s *idem.Store, key string, release <-chan struct{}) (<-chan context.Context, <-chan error) {
	ctxs, errs := make(chan context.Context, 1), make(chan error, 1)
	go func() {
		_, _, err := s.Do(context.Background(), idem.Request{Key: key, Fingerprint: "fp"}, func(ctx context.Context) (idem.Result, error) {
			ctxs <- ctx
			select {
			case <-release:
			case <-ctx.Done():
			}
			return idem.Result{Status: 200}, ctx.Err()
		})
		errs <- err
	}()
	return ctxs, errs
}

func TestDo_ContextDeadlineIsLeaseEnd(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	clock := idemtest.NewClock(start)
	extended := make(chan struct{}, 4)
	s, _ := leaseStore(t, clock, nil, idem.Options{Observer: idem.ObserverFunc(func(e idem.Event) {
		if e.Kind == idem.EventExtended {
			extended <- struct{}{}
		}
	})})
	release := make(chan struct{})
	ctxs, errs := runHeld(s, "k", release)
	fnCtx := <-ctxs
	d, ok := fnCtx.Deadline()
	require.True(t, ok)
	require.Equal(t, start.Add(testLease), d)
	c, ok := idem.ClaimFromContext(fnCtx)
	require.True(t, ok)
	require.Equal(t, c.LeaseEnds(), d)

	clock.BlockUntil(1) // the heartbeat's next beat
	clock.Advance(testLease / 3)
	<-extended
	d, _ = fnCtx.Deadline()
	require.Equal(t, start.Add(testLease/3+testLease), d, "the deadline moved with the extension")
	require.NoError(t, fnCtx.Err())

	close(release)
	require.NoError(t, <-errs)
}

func TestDo_ContextDeadlineIsParentsWhenEarlier(t *testing.T) {
	clock := idemtest.NewClock(time.Now().Add(time.Hour))
	s, _ := leaseStore(t, clock, nil, idem.Options{})
	parent, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	want, _ := parent.Deadline()
	_, _, err := s.Do(parent, idem.Request{Key: "k", Fingerprint: "fp"}, func(ctx context.Context) (idem.Result, error) {
		d, ok := ctx.Deadline()
		require.True(t, ok)
		require.Equal(t, want, d)
		return idem.Result{}, nil
	})
	require.NoError(t, err)
}

// An extension that keeps failing (storage unavailable) is tried again
// while the lease lasts; when the lease ends unextended, fn's context is
// cancelled with context.DeadlineExceeded.
func TestDo_LeaseEndsUnextended_CancelsEffect(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	clock := idemtest.NewClock(start)
	s, tried := leaseStore(t, clock, idem.ErrUnavailable, idem.Options{})
	ctxs, errs := runHeld(s, "k", nil)
	fnCtx := <-ctxs

	clock.BlockUntil(1)
	clock.Advance(testLease / 3)
	<-tried
	clock.BlockUntil(1) // the next beat, after the failed extension
	require.NoError(t, fnCtx.Err(), "a failed extension is a hiccup while the lease lasts")

	clock.Advance(testLease - testLease/3)
	<-fnCtx.Done()
	require.ErrorIs(t, fnCtx.Err(), context.DeadlineExceeded)
	require.ErrorIs(t, context.Cause(fnCtx), context.DeadlineExceeded)
	require.ErrorIs(t, <-errs, context.DeadlineExceeded)
}

func TestDo_Fenced_CancelsEffectWithCause(t *testing.T) {
	clock := idemtest.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	s, _ := leaseStore(t, clock, &idem.FencedError{Key: "k", Token: 1}, idem.Options{})
	ctxs, errs := runHeld(s, "k", nil)
	fnCtx := <-ctxs
	clock.BlockUntil(1)
	clock.Advance(testLease / 3)
	<-fnCtx.Done()
	require.ErrorIs(t, fnCtx.Err(), context.Canceled)
	require.ErrorIs(t, context.Cause(fnCtx), idem.ErrFenced)
	err := <-errs
	require.True(t, errors.Is(err, context.Canceled), "%v", err)
}
