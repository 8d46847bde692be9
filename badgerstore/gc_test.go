package badgerstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/badgerstore"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/badger"
	"github.com/stretchr/testify/require"
)

// The rounds of a writer that makes value-log GC rewrite (here and in
// TestPowerLoss): big results (over the 16 KiB value threshold, so in the
// value log), 3 of 4 expiring at the end of their round, and small ones;
// then the expiry, a sweep and the store's maintenance.
const (
	gcBigPerRound = 32
	gcEphemeral   = time.Hour         // the retention of the big results that expire
	gcKeep        = 10000 * time.Hour // the retention of everything else
	gcRoundStep   = 2 * time.Hour     // the writer's clock moves this much a round
)

// powerLossStart is the writer's clock at its start. Checks open the
// store with a clock there too, so that every record the writer did not
// expire is live.
func powerLossStart() time.Time { return time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC) }

// powerLossOptions are the writer's: small memtables and value-log files,
// so that flushes, compactions and GC come within a few rounds.
//
// Value-log GC rewrites a file only once compactions have counted the
// values dropped from it (Badger's discard stats), and background
// compactions run when they will. So every Close also compacts level 0
// (flushed there from the memtable, with the sweep's deletions): after a
// close, the expired results of every round before it are counted, and
// the next GC's outcome does not depend on when a compactor ran.
func powerLossOptions(clk idem.Clock) (*idem.Options, badgerstore.Options) {
	return &idem.Options{Clock: clk, SweepInterval: -1, CloseTimeout: time.Second},
		badgerstore.TuneBadger(badgerstore.Options{MemTableSize: 128 << 10}, func(bo *badger.Options) {
			bo.ValueLogFileSize = 1 << 20
			bo.CompactL0OnClose = true
		})
}

// openPowerLoss opens dir with powerLossOptions.
func openPowerLoss(dir string, clk idem.Clock) (*idem.Store, error) {
	o, bo := powerLossOptions(clk)
	return idemtest.OpenBadger(dir, o, bo)
}

// writeGCRound writes a round's results, calling ack with each once it
// is acknowledged. Big results expire (key "e-ROUND-I") or stay
// ("k-ROUND-I"); small ones ("s-ROUND-I") stay.
func writeGCRound(t testing.TB, s *idem.Store, rng *rand.Rand, round int, ack func(key string, body []byte)) {
	do := func(key string, ret time.Duration, body []byte) {
		_, replayed, err := s.Do(bg, idem.Request{Key: key, Retention: ret}, func(context.Context) (backend.Result, error) {
			return backend.Result{Status: 200, Body: body}, nil
		})
		require.NoError(t, err, key)
		require.False(t, replayed, key)
		ack(key, body)
	}
	for i := range gcBigPerRound {
		kind, ret := "e", gcEphemeral
		if i%4 == 0 {
			kind, ret = "k", gcKeep
		}
		do(fmt.Sprintf("%s-%d-%d", kind, round, i), ret, randomBody(rng, 16<<10+1+rng.IntN(24<<10)))
		do(fmt.Sprintf("s-%d-%d", round, i), gcKeep, randomBody(rng, 512+rng.IntN(6<<10)))
	}
}

// collectGCRound expires the round's ephemeral results, sweeps them away
// and runs the store's maintenance (value-log GC); it returns how many
// value-log files the GC removed.
func collectGCRound(t testing.TB, s *idem.Store, clk *idemtest.Clock, dir string) int {
	clk.Advance(gcRoundStep)
	_, err := s.Sweep(bg)
	require.NoError(t, err)
	before := valueLogs(t, dir)
	require.NoError(t, s.Backend().(backend.Maintainer).Maintain(bg))
	after := valueLogs(t, dir)
	gone := 0
	for name := range before {
		if !after[name] {
			gone++
		}
	}
	return gone
}

func randomBody(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// valueLogs returns the names of Badger's value-log files in dir.
func valueLogs(t testing.TB, dir string) map[string]bool {
	names, err := filepath.Glob(filepath.Join(dir, "*.vlog"))
	require.NoError(t, err)
	out := map[string]bool{}
	for _, n := range names {
		out[filepath.Base(n)] = true
	}
	return out
}

// errRanAgain is the checks' effect: a result that does not replay runs it.
var errRanAgain = errors.New("the effect ran again: the result was lost")

// TestBadger_ValueLogGC_KeepsLiveResults: the store's maintenance
// rewrites value-log files whose results mostly expired, deletes them
// once done (its hold on the deletion is released), and every live
// result still replays its own body, before and after a reopen.
// TestPowerLoss checks that the rewrites are durable before the deletion.
//
// The store is closed after every round, which compacts the round's
// deletions (powerLossOptions): by the end of round 1 the GC has rewritten
// a file, either in round 0 (if a background compaction came first) or in
// round 1, after the close counted round 0's expired results (3 in 4 of
// the bytes of the file that holds them).
func TestBadger_ValueLogGC_KeepsLiveResults(t *testing.T) {
	dir := t.TempDir()
	clk := idemtest.NewClock(powerLossStart())
	rng := rand.New(rand.NewPCG(1, 2))
	s, err := openPowerLoss(dir, clk)
	require.NoError(t, err)
	t.Cleanup(func() {
		if s != nil {
			_ = s.Close()
		}
	})
	live := map[string][]byte{}
	gone := 0
	for round := range 4 {
		writeGCRound(t, s, rng, round, func(key string, body []byte) {
			if key[0] != 'e' {
				live[key] = body
			}
		})
		gone += collectGCRound(t, s, clk, dir)
		if round >= 1 {
			require.Positive(t, gone, "no value-log GC rewrote a file by round %d", round)
		}
		require.NoError(t, s.Close()) // a checkpoint, and a compaction of level 0
		s, err = openPowerLoss(dir, clk)
		require.NoError(t, err)
	}
	t.Logf("GC removed %d value-log files; %d live results", gone, len(live))
	check := func() {
		for key, body := range live {
			res, replayed, err := s.Do(bg, idem.Request{Key: key}, func(context.Context) (backend.Result, error) {
				return backend.Result{}, errRanAgain
			})
			require.NoError(t, err, key)
			require.True(t, replayed, key)
			require.Equal(t, body, res.Body, key)
		}
	}
	check()
	require.NoError(t, s.Close())
	s, err = openPowerLoss(dir, idemtest.NewClock(powerLossStart()))
	require.NoError(t, err)
	check()
}
