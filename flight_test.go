package idem_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/badgerstore"
	"github.com/idemkit/idem/idemtest"
	"github.com/stretchr/testify/require"
)

// waitUntil yields until cond holds. The deadline only turns a hang into a
// failure; it asserts nothing about speed.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		runtime.Gosched()
	}
}

// TestResolve_OneResolverCallPerClaim: sixteen concurrent requests for one
// orphaned claim ask the Resolver once; the others wait for its verdict
// and replay the result it saved.
func TestResolve_OneResolverCallPerClaim(t *testing.T) {
	clk := idemtest.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	var calls atomic.Int32
	called := make(chan struct{}, 16)
	release := make(chan struct{})
	resolver := idem.ResolverFunc(func(ctx context.Context, rec *idem.Record) (idem.Resolution, error) {
		calls.Add(1)
		called <- struct{}{}
		<-release
		return idem.Resolution{Verdict: idem.VerdictCommitted, Result: idem.Result{Status: 201, Body: []byte("from-ledger")}}, nil
	})
	s := openStoreWith(t, "", &idem.Options{Clock: clk, SweepInterval: -1, Lease: 10 * time.Second,
		Resolver: resolver, CloseTimeout: time.Millisecond}, badgerstore.Options{InMemory: true})
	req := idem.Request{Scope: "t", Key: "refund-1", Fingerprint: "fp"}
	_, _, err := s.Begin(context.Background(), req) // the holder dies: its claim is orphaned
	require.NoError(t, err)
	clk.Advance(time.Minute)

	const n = 16
	results := make([]*idem.Result, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var c *idem.Claim
			c, results[i], errs[i] = s.Begin(context.Background(), req)
			if c != nil {
				errs[i] = errors.New("claimed: the effect would run again")
			}
		}()
	}
	<-called
	waitUntil(t, "the other requests wait on the resolution", func() bool { return idem.ResolveWaiters(s) == n-1 })
	close(release)
	wg.Wait()
	require.Equal(t, int32(1), calls.Load(), "the Resolver was asked once")
	for i := range n {
		require.NoError(t, errs[i])
		require.Equal(t, "from-ledger", string(results[i].Body))
	}
}

// TestResolve_WaiterBoundedByContext: a request waiting on another's
// resolution stops when its own context ends.
func TestResolve_WaiterBoundedByContext(t *testing.T) {
	clk := idemtest.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	called := make(chan struct{}, 2)
	release := make(chan struct{})
	resolver := idem.ResolverFunc(func(ctx context.Context, rec *idem.Record) (idem.Resolution, error) {
		called <- struct{}{}
		<-release
		return idem.Resolution{Verdict: idem.VerdictNotCommitted}, nil
	})
	s := openStoreWith(t, "", &idem.Options{Clock: clk, SweepInterval: -1, Lease: 10 * time.Second,
		Resolver: resolver, CloseTimeout: time.Millisecond}, badgerstore.Options{InMemory: true})
	req := idem.Request{Scope: "t", Key: "k", Fingerprint: "fp"}
	_, _, err := s.Begin(context.Background(), req)
	require.NoError(t, err)
	clk.Advance(time.Minute)
	leader := make(chan error, 1)
	go func() {
		_, _, err := s.Begin(context.Background(), req)
		leader <- err
	}()
	<-called
	ctx, cancel := context.WithCancel(context.Background())
	waiter := make(chan error, 1)
	go func() {
		_, _, err := s.Begin(ctx, req)
		waiter <- err
	}()
	waitUntil(t, "the second request waits", func() bool { return idem.ResolveWaiters(s) == 1 })
	cancel()
	require.ErrorIs(t, <-waiter, context.Canceled)
	close(release)
	require.NoError(t, <-leader, "the leader claims the released key")
	require.Len(t, called, 0, "the Resolver was asked once")
}
