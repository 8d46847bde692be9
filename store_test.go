package idem_test

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/stretchr/testify/require"
)

func TestBadger_Conformance_Disk(t *testing.T) {
	idemtest.TestBackend(t, func(t testing.TB) idem.Backend {
		b, err := idem.OpenBadger(t.TempDir(), idem.BadgerOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return b
	})
}

func TestBadger_Conformance_InMemory(t *testing.T) {
	idemtest.TestBackend(t, func(t testing.TB) idem.Backend {
		b, err := idem.OpenBadger("", idem.BadgerOptions{InMemory: true})
		if err != nil {
			t.Fatal(err)
		}
		return b
	})
}

func TestOpen_DurabilitySetOnce(t *testing.T) {
	_, err := idem.Open(t.TempDir(), &idem.Options{Badger: idem.BadgerOptions{Durability: idem.Fast}})
	require.Error(t, err, "Badger.Durability Fast under Options.Durability Durable")
	s, err := idem.Open(t.TempDir(), &idem.Options{Durability: idem.Fast, Badger: idem.BadgerOptions{Durability: idem.Fast}})
	require.NoError(t, err, "the same value in both is no conflict")
	require.NoError(t, s.Close())
	s, err = idem.Open(t.TempDir(), &idem.Options{Durability: idem.Fast})
	require.NoError(t, err)
	require.Equal(t, idem.Fast, s.Options().Durability)
	require.NoError(t, s.Close())
}

// maintained counts the Store's calls of Maintain.
type maintained struct {
	idem.Backend
	calls chan struct{}
}

func (m *maintained) Maintain(context.Context) error {
	m.calls <- struct{}{}
	return nil
}

func TestStore_Background_CallsMaintainer(t *testing.T) {
	b, err := idem.OpenBadger("", idem.BadgerOptions{InMemory: true})
	require.NoError(t, err)
	m := &maintained{Backend: b, calls: make(chan struct{}, 1)}
	clk := idemtest.NewClock(time.Unix(1_700_000_000, 0))
	s := idem.New(m, &idem.Options{Clock: clk, SweepInterval: time.Minute})
	<-m.calls // after the first sweep
	clk.BlockUntil(1)
	clk.Advance(time.Minute)
	<-m.calls // and after every later one
	require.NoError(t, s.Close())
}

// gate blocks Get of the key "block" until released, and notes whether
// the Store closed it while such a Get was running.
type gate struct {
	idem.Backend
	entered, release chan struct{}
	running          atomic.Int32
	closedEarly      atomic.Bool
}

func (g *gate) Get(ctx context.Context, scope, key string) (*idem.Record, error) {
	if key == "block" {
		g.running.Add(1)
		defer g.running.Add(-1)
		g.entered <- struct{}{}
		<-g.release
	}
	return g.Backend.Get(ctx, scope, key)
}

func (g *gate) Close() error {
	g.closedEarly.Store(g.running.Load() != 0)
	return g.Backend.Close()
}

func TestStore_Close_WaitsForCallsInFlight(t *testing.T) {
	b, err := idem.OpenBadger("", idem.BadgerOptions{InMemory: true})
	require.NoError(t, err)
	g := &gate{Backend: b, entered: make(chan struct{}), release: make(chan struct{})}
	s := idem.New(g, &idem.Options{SweepInterval: -1})
	got := make(chan error)
	go func() {
		_, err := s.Get(context.Background(), "", "block")
		got <- err
	}()
	<-g.entered
	closed := make(chan error)
	go func() { closed <- s.Close() }()
	// Once calls are refused, Close is waiting for the one in flight.
	for {
		if _, err := s.Get(context.Background(), "", "other"); errors.Is(err, idem.ErrClosed) {
			break
		}
		runtime.Gosched()
	}
	close(g.release)
	require.ErrorIs(t, <-got, idem.ErrNotFound)
	require.NoError(t, <-closed)
	require.False(t, g.closedEarly.Load(), "the backend was closed under a call")
}
