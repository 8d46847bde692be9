package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/pgstore"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// txFixture is a records table and a ledger table beside it: the ledger is
// where the tests' transactional effects write.
type txFixture struct {
	table  string
	ledger string // quoted, schema-qualified
}

func newTxFixture(t *testing.T) txFixture {
	t.Helper()
	table := uniqueTable("tx")
	ledger := pgx.Identifier{server.schema, table + "_ledger"}.Sanitize()
	mustExec(t, "CREATE TABLE "+ledger+" (key text NOT NULL, executor text NOT NULL)")
	return txFixture{table: table, ledger: ledger}
}

// store opens a Store on the fixture's table with its own pool, as another
// instance would.
func (f txFixture) store(t *testing.T, o *idem.Options) *idem.Store {
	t.Helper()
	b := newBackend(t, newPool(t, 8), &pgstore.Options{Table: f.table})
	return newStore(t, b, o)
}

// insert is an effect writing one ledger row in tx.
func (f txFixture) insert(ctx context.Context, tx pgx.Tx, key, executor string) error {
	_, err := tx.Exec(ctx, "INSERT INTO "+f.ledger+" (key, executor) VALUES ($1, $2)", key, executor)
	return err
}

func (f txFixture) rows(t *testing.T, key string) []string {
	t.Helper()
	rows, err := pool(t).Query(ctx, "SELECT executor FROM "+f.ledger+" WHERE key = $1 ORDER BY executor", key)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

func req(key string) idem.Request {
	return idem.Request{Key: key, Fingerprint: "fp-" + key}
}

func TestDoTx_EffectCommitsWithRecord(t *testing.T) {
	f := newTxFixture(t)
	s := f.store(t, nil)
	runs := 0
	fn := func(ctx context.Context, tx pgx.Tx) (idem.Result, error) {
		runs++
		return result("paid"), f.insert(ctx, tx, "k1", "a")
	}
	res, replayed, err := idem.DoTx(ctx, s, req("k1"), fn)
	require.NoError(t, err)
	require.False(t, replayed)
	require.Equal(t, "paid", string(res.Body))

	res, replayed, err = idem.DoTx(ctx, s, req("k1"), fn)
	require.NoError(t, err)
	require.True(t, replayed)
	require.Equal(t, "paid", string(res.Body))
	require.Equal(t, 1, runs)
	require.Equal(t, []string{"a"}, f.rows(t, "k1"))

	rec, err := s.Get(ctx, "", "k1")
	require.NoError(t, err)
	require.Equal(t, idem.StateDone, rec.State)
	require.Equal(t, "completed", rec.Attempts[len(rec.Attempts)-1].Outcome)
}

// A holder paused past its lease: another instance, whose clock is past
// the lease's end, recovers the claim without a Resolver and runs the
// effect itself. When the paused holder resumes, its transaction must not
// commit: its completion is fenced and its ledger row rolled back.
func TestDoTx_PausedHolderCannotCommitAfterRecovery(t *testing.T) {
	f := newTxFixture(t)
	clock1 := idemtest.NewClock(epoch)
	s1 := f.store(t, &idem.Options{Clock: clock1, Lease: lease, SweepInterval: -1})
	clock2 := idemtest.NewClock(epoch.Add(lease + time.Minute))
	resolver := idem.ResolverFunc(func(context.Context, *idem.Record) (idem.Resolution, error) {
		t.Error("the Resolver was asked about a transactional claim")
		return idem.Resolution{}, nil
	})
	s2 := f.store(t, &idem.Options{Clock: clock2, Lease: lease, Resolver: resolver, SweepInterval: -1})

	written, resume := make(chan struct{}), make(chan struct{})
	type outcome struct {
		res idem.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, _, err := idem.DoTx(ctx, s1, req("k"), func(ctx context.Context, tx pgx.Tx) (idem.Result, error) {
			err := f.insert(ctx, tx, "k", "paused")
			close(written)
			<-resume // paused: clock1 stands still, so no heartbeat extends
			return result("first"), err
		})
		done <- outcome{res, err}
	}()
	<-written

	rec, err := s2.Get(ctx, "", "k")
	require.NoError(t, err)
	require.Equal(t, "transactional", rec.Attempts[len(rec.Attempts)-1].Reason)
	rep, err := s2.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.NotCommitted)
	rec, err = s2.Get(ctx, "", "k")
	require.NoError(t, err)
	require.Equal(t, idem.StateReleased, rec.State)
	require.Equal(t, "recovered: transactional effect not committed", rec.Attempts[len(rec.Attempts)-1].Reason)

	res, replayed, err := idem.DoTx(ctx, s2, req("k"), func(ctx context.Context, tx pgx.Tx) (idem.Result, error) {
		return result("second"), f.insert(ctx, tx, "k", "second")
	})
	require.NoError(t, err)
	require.False(t, replayed)
	require.Equal(t, "second", string(res.Body))

	close(resume)
	out := <-done
	require.ErrorIs(t, out.err, idem.ErrFenced)
	var late *idem.LateCompletionError
	require.False(t, errors.As(out.err, &late), "a rolled-back transaction is no late completion")
	require.Equal(t, "first", string(out.res.Body), "Do returns what fn returned")
	require.Equal(t, []string{"second"}, f.rows(t, "k"), "the paused holder's write was rolled back")

	res, replayed, err = idem.DoTx(ctx, s1, req("k"), func(context.Context, pgx.Tx) (idem.Result, error) {
		t.Error("the effect ran again")
		return idem.Result{}, nil
	})
	require.NoError(t, err)
	require.True(t, replayed)
	require.Equal(t, "second", string(res.Body))
}

// A claim taken without DoTx is not transactional: with no Resolver it
// stays unresolved.
func TestDoTx_PlainClaimStillNeedsResolver(t *testing.T) {
	f := newTxFixture(t)
	clock := idemtest.NewClock(epoch)
	s := f.store(t, &idem.Options{Clock: clock, Lease: lease})
	c, _, err := s.Begin(ctx, req("plain"))
	require.NoError(t, err)
	require.NotNil(t, c)
	clock.Advance(lease + time.Second)
	rep, err := s.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 0, rep.NotCommitted)
	require.Equal(t, 1, rep.Unresolved)
}

func TestDoTx_ReleaseRollsBackEffect(t *testing.T) {
	f := newTxFixture(t)
	s := f.store(t, nil)
	boom := errors.New("declined")
	_, _, err := idem.DoTx(ctx, s, req("r"), func(ctx context.Context, tx pgx.Tx) (idem.Result, error) {
		if err := f.insert(ctx, tx, "r", "failed"); err != nil {
			return idem.Result{}, err
		}
		return idem.Result{}, boom
	})
	require.ErrorIs(t, err, boom)
	require.Empty(t, f.rows(t, "r"))
	rec, err := s.Get(ctx, "", "r")
	require.NoError(t, err)
	require.Equal(t, idem.StateReleased, rec.State)

	// A 500 is released by the default policy too, and rolled back.
	res, _, err := idem.DoTx(ctx, s, req("r"), func(ctx context.Context, tx pgx.Tx) (idem.Result, error) {
		return idem.Result{Status: 503}, f.insert(ctx, tx, "r", "503")
	})
	require.NoError(t, err)
	require.Equal(t, 503, res.Status)
	require.Empty(t, f.rows(t, "r"))

	_, replayed, err := idem.DoTx(ctx, s, req("r"), func(ctx context.Context, tx pgx.Tx) (idem.Result, error) {
		return result("ok"), f.insert(ctx, tx, "r", "ok")
	})
	require.NoError(t, err)
	require.False(t, replayed)
	require.Equal(t, []string{"ok"}, f.rows(t, "r"))
}

// A panic rolls the effect's transaction back, so the claim is released
// even when the Store has a Resolver (which Do would hold it for): the
// effect did not commit, and a retry runs it.
func TestDoTx_PanicRollsBackAndReleases(t *testing.T) {
	for _, withResolver := range []bool{false, true} {
		t.Run(fmt.Sprintf("resolver=%t", withResolver), func(t *testing.T) {
			f := newTxFixture(t)
			var opts *idem.Options
			if withResolver {
				opts = &idem.Options{Resolver: idem.ResolverFunc(func(context.Context, *idem.Record) (idem.Resolution, error) {
					t.Error("the Resolver was asked about a transactional effect")
					return idem.Resolution{}, nil
				})}
			}
			s := f.store(t, opts)
			func() {
				defer func() { require.Equal(t, "bug", recover()) }()
				_, _, _ = idem.DoTx(ctx, s, req("p"), func(ctx context.Context, tx pgx.Tx) (idem.Result, error) {
					require.NoError(t, f.insert(ctx, tx, "p", "panicked"))
					panic("bug")
				})
			}()
			require.Empty(t, f.rows(t, "p"))
			rec, err := s.Get(ctx, "", "p")
			require.NoError(t, err)
			require.Equal(t, idem.StateReleased, rec.State)
			require.Equal(t, "panic", rec.Attempts[len(rec.Attempts)-1].Reason)
		})
	}
}

// A hold rolls the effect back too; recovery then releases the claim
// without a Resolver.
func TestDoTx_HoldRollsBackThenRecovers(t *testing.T) {
	f := newTxFixture(t)
	clock := idemtest.NewClock(epoch)
	hold := func(idem.Result, error) idem.Decision { return idem.DecisionHold }
	s := f.store(t, &idem.Options{Clock: clock, Lease: lease, Policy: hold})
	_, _, err := idem.DoTx(ctx, s, req("h"), func(ctx context.Context, tx pgx.Tx) (idem.Result, error) {
		return result("held"), f.insert(ctx, tx, "h", "held")
	})
	require.NoError(t, err)
	require.Empty(t, f.rows(t, "h"))
	// The background sweep may have been first; either way the claim ends
	// released without a Resolver.
	_, err = s.Sweep(ctx)
	require.NoError(t, err)
	rec, err := s.Get(ctx, "", "h")
	require.NoError(t, err)
	require.Equal(t, idem.StateReleased, rec.State)
	require.Equal(t, "recovered: transactional effect not committed", rec.Recovered)
}

// Two instances, many goroutines, shared keys: every key's effect
// committed once, and every caller got that result.
func TestDoTx_ConcurrentInstancesOneEffectPerKey(t *testing.T) {
	f := newTxFixture(t)
	stores := []*idem.Store{f.store(t, nil), f.store(t, nil)}
	const keys, workers = 20, 8
	var wg sync.WaitGroup
	errs := make(chan error, workers*keys)
	var mu sync.Mutex
	answers := map[string]map[string]bool{}
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := stores[w%2]
			for i := range keys {
				key := fmt.Sprintf("c%d", i)
				for {
					res, _, err := idem.DoTx(ctx, s, req(key), func(ctx context.Context, tx pgx.Tx) (idem.Result, error) {
						who := fmt.Sprintf("w%d", w)
						return result(who), f.insert(ctx, tx, key, who)
					})
					var inProgress *idem.InProgressError
					if errors.As(err, &inProgress) {
						continue
					}
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					if answers[key] == nil {
						answers[key] = map[string]bool{}
					}
					answers[key][string(res.Body)] = true
					mu.Unlock()
					break
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for i := range keys {
		key := fmt.Sprintf("c%d", i)
		rows := f.rows(t, key)
		require.Len(t, rows, 1, key)
		require.Equal(t, map[string]bool{rows[0]: true}, answers[key], key)
	}
}

func TestDoTx_NotPostgres(t *testing.T) {
	s, err := idem.Open(t.TempDir(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	_, _, err = idem.DoTx(ctx, s, req("x"), func(context.Context, pgx.Tx) (idem.Result, error) {
		return idem.Result{}, nil
	})
	require.ErrorIs(t, err, idem.ErrNoTx)
}
