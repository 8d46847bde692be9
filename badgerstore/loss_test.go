package badgerstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/badgerstore"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/badger"
	"github.com/stretchr/testify/require"
)

// lostStore builds a store whose MANIFEST lost the table of a second
// session, as a truncated MANIFEST does: keys "old-*" were written and
// flushed in a first session, keys "new-*" in a second, and keys "rel-*"
// were released in the first and completed in the second; the MANIFEST is
// cut back to its length after the first. The sessions ran an hour
// before lossClock. It returns the directory and the highest fencing
// token handed out.
func lostStore(t *testing.T, n int) (string, uint64) {
	t.Helper()
	dir := t.TempDir()
	var top uint64
	// Room in level 0 for every table the sessions flush (the new
	// store's mark, each close's): a compaction would delete tables the
	// truncated MANIFEST still names, which no open accepts.
	roomy := badgerstore.TuneBadger(badgerstore.Options{}, func(bo *badger.Options) {
		bo.NumLevelZeroTables, bo.NumLevelZeroTablesStall = 10, 20
	})
	write := func(session int, prefixes ...string) {
		s := openStoreWith(t, dir, &idem.Options{Clock: idemtest.NewClock(lossClock().Now().Add(-time.Hour))}, roomy)
		for _, prefix := range prefixes {
			for i := range n {
				c, _, err := s.Begin(bg, idem.Request{Key: fmt.Sprintf("%s-%d", prefix, i)})
				require.NoError(t, err)
				top = max(top, c.Token())
				if prefix == "rel" && session == 0 {
					require.NoError(t, c.Release(bg, "the first attempt failed"))
					continue
				}
				require.NoError(t, c.Complete(bg, backend.Result{Status: 200, Body: faultBody(i)}))
			}
		}
		require.NoError(t, s.Close())
	}
	manifest := filepath.Join(dir, "MANIFEST")
	write(0, "old", "rel")
	info, err := os.Stat(manifest)
	require.NoError(t, err)
	write(1, "new", "rel")
	require.NoError(t, os.Truncate(manifest, info.Size()))
	return dir, top
}

// lossResolver answers every question with verdict and counts them.
type lossResolver struct {
	verdict idem.Verdict
	result  backend.Result
	mu      sync.Mutex
	asked   []string
}

func (r *lossResolver) Resolve(_ context.Context, rec *backend.Record) (idem.Resolution, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, rec.Key)
	return idem.Resolution{Verdict: r.verdict, Result: r.result}, nil
}

func (r *lossResolver) questions() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.asked)
}

// openLost opens dir, which lost keys, accepting the loss.
func openLost(t *testing.T, dir string, r idem.Resolver, clock *idemtest.Clock) *idem.Store {
	t.Helper()
	o := &idem.Options{Clock: clock}
	if r != nil {
		o.Resolver = r
	}
	return openStoreWith(t, dir, o, badgerstore.Options{AcceptLoss: true})
}

func lossClock() *idemtest.Clock {
	return idemtest.NewClock(time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)) // openStore's
}

// TestAcceptLoss_RefusedWithoutTheFlag: the damage lostStore does is
// caught at open.
func TestAcceptLoss_RefusedWithoutTheFlag(t *testing.T) {
	dir, _ := lostStore(t, 20)
	_, err := idem.Open(dir, &idem.Options{SweepInterval: -1})
	require.ErrorIs(t, err, backend.ErrCorrupt)
}

// TestAcceptLoss_LostKeysGoToTheResolver retries every key of a store
// that lost a table, under each of the Resolver's answers: a lost key's
// effect runs only when the Resolver says it did not commit; a key that
// survived replays its own body without a question.
func TestAcceptLoss_LostKeysGoToTheResolver(t *testing.T) {
	const n = 30
	src, _ := lostStore(t, n)
	for _, c := range []struct {
		name     string
		resolver *lossResolver
	}{
		{"committed", &lossResolver{verdict: idem.VerdictCommitted, result: backend.Result{Status: 201, Body: []byte("from downstream")}}},
		{"not committed", &lossResolver{verdict: idem.VerdictNotCommitted}},
		{"unknown", &lossResolver{verdict: idem.VerdictUnknown}},
		{"no resolver", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			var r idem.Resolver
			if c.resolver != nil {
				r = c.resolver
			}
			s := openLost(t, copyDir(t, src), r, lossClock())
			for i := range n {
				res, replayed, err := s.Do(bg, idem.Request{Key: fmt.Sprintf("old-%d", i)}, func(context.Context) (backend.Result, error) {
					return backend.Result{}, fmt.Errorf("the effect of old-%d ran again", i)
				})
				require.NoError(t, err, "a key that survived")
				require.True(t, replayed)
				require.Equal(t, faultBody(i), res.Body)
			}
			if c.resolver != nil {
				require.Zero(t, c.resolver.questions(), "keys that survived cost no question")
			}
			ran := map[string]int{}
			var lost []string
			for i := range n {
				lost = append(lost, fmt.Sprintf("new-%d", i), fmt.Sprintf("rel-%d", i))
			}
			for round := range 2 {
				for _, key := range lost {
					res, replayed, err := s.Do(bg, idem.Request{Key: key}, func(context.Context) (backend.Result, error) {
						ran[key]++
						return backend.Result{Status: 200, Body: []byte("ran again")}, nil
					})
					switch {
					case c.resolver != nil && c.resolver.verdict == idem.VerdictCommitted:
						require.NoError(t, err)
						require.True(t, replayed, "%s round %d", key, round)
						require.Equal(t, "from downstream", string(res.Body))
					case c.resolver != nil && c.resolver.verdict == idem.VerdictNotCommitted:
						require.NoError(t, err)
						require.Equal(t, round == 1, replayed, "%s round %d", key, round)
						require.Equal(t, "ran again", string(res.Body))
					default:
						var unk *idem.OutcomeUnknownError
						require.ErrorAs(t, err, &unk, "%s round %d: held", key, round)
						require.ErrorIs(t, err, idem.ErrOutcomeUnknown)
						rec, err := s.Get(bg, "", key)
						require.NoError(t, err)
						require.Equal(t, backend.StateInProgress, rec.State, "held for the Resolver or an operator")
					}
				}
			}
			for key, runs := range ran {
				require.Equal(t, 1, runs, "%s ran %d times", key, runs)
			}
			switch {
			case c.resolver == nil:
				require.Empty(t, ran)
			case c.resolver.verdict == idem.VerdictNotCommitted:
				require.Len(t, ran, 2*n)
				require.Equal(t, 2*n, c.resolver.questions(), "one question per lost key")
			case c.resolver.verdict == idem.VerdictCommitted:
				require.Empty(t, ran)
				require.Equal(t, 2*n, c.resolver.questions(), "one question per lost key")
				rec, err := s.Get(bg, "", "new-0")
				require.NoError(t, err)
				require.Equal(t, "committed", rec.Recovered)
			default:
				require.Empty(t, ran)
			}

			// A brand-new key claimed in the window is asked about too.
			calls := 0
			fresh := func(context.Context) (backend.Result, error) {
				calls++
				return backend.Result{Body: []byte("fresh")}, nil
			}
			_, _, err := s.Do(bg, idem.Request{Key: "fresh"}, fresh)
			if c.resolver != nil && c.resolver.verdict == idem.VerdictNotCommitted {
				require.NoError(t, err)
				require.Equal(t, 1, calls)
				_, replayed, err := s.Do(bg, idem.Request{Key: "fresh"}, fresh)
				require.NoError(t, err)
				require.True(t, replayed)
				require.Equal(t, 1, calls)

				// A key released after the loss is claimed again without a question.
				asked := c.resolver.questions()
				failing := func(context.Context) (backend.Result, error) { calls++; return backend.Result{}, errors.New("failed") }
				_, _, err = s.Do(bg, idem.Request{Key: "failed-after"}, failing)
				require.ErrorContains(t, err, "failed")
				require.Equal(t, asked+1, c.resolver.questions(), "absent: asked")
				_, _, err = s.Do(bg, idem.Request{Key: "failed-after"}, failing)
				require.ErrorContains(t, err, "failed")
				require.Equal(t, asked+1, c.resolver.questions(), "released in the window: not asked")
				require.Equal(t, 3, calls)
			} else {
				require.Zero(t, calls)
			}

			w, has := s.Backend().(*badgerstore.Backend).LossWindow()
			require.True(t, has)
			require.Contains(t, w.Lost, "MANIFEST")
		})
	}
}

// TestAcceptLoss_TokensNeverRepeat: the first claim after the loss gets a
// token above every token the lost claims held.
func TestAcceptLoss_TokensNeverRepeat(t *testing.T) {
	dir, top := lostStore(t, 10)
	s := openLost(t, dir, &lossResolver{verdict: idem.VerdictNotCommitted}, lossClock())
	c, _, err := s.Begin(bg, idem.Request{Key: "new-0"})
	require.NoError(t, err)
	require.Greater(t, c.Token(), top)
}

// TestAcceptLoss_WindowSurvivesARestartAndEnds: the window is kept in the
// store (a reopen without the flag still asks), ends by itself at its End
// in the store's clock, and an operator can end it early.
func TestAcceptLoss_WindowSurvivesARestartAndEnds(t *testing.T) {
	dir, _ := lostStore(t, 10)
	clock := lossClock()
	r := &lossResolver{verdict: idem.VerdictCommitted}
	s := openLost(t, dir, r, clock)
	w, has := s.Backend().(*badgerstore.Backend).LossWindow()
	require.True(t, has)
	require.Equal(t, clock.Now(), w.Start)
	require.Equal(t, clock.Now().Add(idem.DefaultRetention), w.End)
	require.NoError(t, s.Close())

	s = openStore(t, dir, &idem.Options{Clock: clock, Resolver: r})
	_, replayed, err := s.Do(bg, idem.Request{Key: "new-1"}, ok("ran"))
	require.NoError(t, err)
	require.True(t, replayed, "asked after a restart")
	require.Equal(t, 1, r.questions())
	w2, _ := s.Backend().(*badgerstore.Backend).LossWindow()
	require.Equal(t, w, w2, "a reopen opens no new window")

	clock.Set(w.End)
	_, replayed, err = s.Do(bg, idem.Request{Key: "new-2"}, ok("ran"))
	require.NoError(t, err)
	require.False(t, replayed, "the window has ended")
	require.Equal(t, 1, r.questions())
	require.NoError(t, s.Close())

	clock.Set(w.Start)
	s = openStore(t, dir, &idem.Options{Clock: clock, Resolver: r})
	require.NoError(t, s.Backend().(*badgerstore.Backend).EndLossWindow(bg))
	_, replayed, err = s.Do(bg, idem.Request{Key: "new-3"}, ok("ran"))
	require.NoError(t, err)
	require.False(t, replayed, "the window was ended")
	require.Equal(t, 1, r.questions())
	_, has = s.Backend().(*badgerstore.Backend).LossWindow()
	require.False(t, has)
}

// TestAcceptLoss_HeldKeyIsResolvedLater: a key held for want of an answer
// is settled by recovery once the Resolver knows, and its effect never
// runs when it committed.
func TestAcceptLoss_HeldKeyIsResolvedLater(t *testing.T) {
	dir, _ := lostStore(t, 5)
	var verdict atomic.Uint32 // idem.VerdictUnknown
	r := idem.ResolverFunc(func(context.Context, *backend.Record) (idem.Resolution, error) {
		return idem.Resolution{Verdict: idem.Verdict(verdict.Load()), Result: backend.Result{Body: []byte("downstream")}}, nil
	})
	clock := lossClock()
	s := openLost(t, dir, r, clock)
	run := func(context.Context) (backend.Result, error) {
		return backend.Result{}, errors.New("the effect ran again")
	}
	_, _, err := s.Do(bg, idem.Request{Key: "new-0"}, run)
	require.ErrorIs(t, err, idem.ErrOutcomeUnknown)

	verdict.Store(uint32(idem.VerdictCommitted))
	clock.Advance(time.Minute) // past the recheck back-off
	rep, err := s.Sweep(bg)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Committed)
	res, replayed, err := s.Do(bg, idem.Request{Key: "new-0"}, run)
	require.NoError(t, err)
	require.True(t, replayed)
	require.Equal(t, "downstream", string(res.Body))
}
