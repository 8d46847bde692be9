package idemtest

import (
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/stretchr/testify/require"
)

// testCountsExactOrMarked checks the counting rule every backend keeps
// (docs/contract.md, "Counts"): replays are counted in memory and reach
// the record at a flush (here, Sweep), never more than were answered; a
// backend that keeps a count ledger reports the count as exact when
// nothing was lost, and one that keeps none reports every count as a lower
// bound. Both paths of a replay are counted: from the backend (a record
// another Store completed, so not in this one's replay cache) and from the
// replay cache (the replays after it).
func testCountsExactOrMarked(t *testing.T, nb source) {
	e := newEnv(t, nb)
	other := idem.New(unowned{e.b}, &idem.Options{Clock: e.clk, SweepInterval: -1, Lease: lease,
		Retention: retention, CloseTimeout: time.Millisecond, Keys: nb.keys, CountInterval: time.Hour})
	e.clk.Advance(time.Minute)
	cached, stored := req("cached", "fp"), req("stored", "fp")
	require.NoError(t, e.claim(cached).Complete(ctx, backend.Result{Status: 200, Body: []byte("x")}))
	c, res, err := other.Begin(ctx, stored)
	require.NoError(t, err)
	require.Nil(t, res)
	require.NoError(t, c.Complete(ctx, backend.Result{Status: 200, Body: []byte("y")}))
	require.NoError(t, other.Close())
	for i := range 5 {
		e.clk.Advance(time.Second)
		e.replay(cached)
		if i < 3 {
			e.replay(stored)
		}
	}
	// Not flushed yet: the records hold none of them.
	require.Zero(t, e.get(cached).Replays)
	require.Zero(t, e.get(stored).Replays)
	_, err = e.store.Sweep(ctx)
	require.NoError(t, err)
	_, ledger := e.b.(backend.CountLedger)
	for _, c := range []struct {
		r          idem.Request
		want       int64
		lastReplay time.Time
	}{{cached, 5, e.clk.Now()}, {stored, 3, e.clk.Now().Add(-2 * time.Second)}} {
		rec := e.get(c.r)
		require.Equal(t, c.want, rec.Replays, "replays of %s", c.r.Key)
		require.True(t, rec.LastReplay.Equal(c.lastReplay), "last replay of %s: %s", c.r.Key, rec.LastReplay)
		require.Equal(t, !ledger, e.store.CountsApproximate(rec),
			"a count is exact, with nothing lost, exactly on a backend with a count ledger")
	}
	// A second flush adds only what came since.
	e.replay(stored)
	_, err = e.store.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(4), e.get(stored).Replays)
}
