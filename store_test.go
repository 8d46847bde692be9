package idem_test

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/badgerstore"
	"github.com/idemkit/idem/idemtest"
	"github.com/stretchr/testify/require"
)

// Open gives Options.Durability to the embedded backend.
func TestOpen_Durability(t *testing.T) {
	s, err := idem.Open(t.TempDir(), &idem.Options{Durability: idem.Fast})
	require.NoError(t, err)
	require.Equal(t, idem.Fast, s.Options().Durability)
	require.Equal(t, idem.Fast, s.Backend().(*badgerstore.Backend).Durability())
	require.NoError(t, s.Close())
	s, err = idem.Open(t.TempDir(), nil)
	require.NoError(t, err)
	require.Equal(t, idem.Durable, s.Backend().(*badgerstore.Backend).Durability())
	require.NoError(t, s.Close())
}

// maintained counts the Store's calls of Maintain.
type maintained struct {
	backend.Backend
	calls chan struct{}
}

func (m *maintained) Maintain(context.Context) error {
	m.calls <- struct{}{}
	return nil
}

func TestStore_Background_CallsMaintainer(t *testing.T) {
	b, err := badgerstore.Open("", badgerstore.Options{InMemory: true})
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
	backend.Backend
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
	b, err := badgerstore.Open("", badgerstore.Options{InMemory: true})
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
