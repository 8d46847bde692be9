package pgstore_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/pgstore"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// sendCounter counts what a pool sends: every query and every batch is one
// message sequence to the server and, sent alone, one round trip.
type sendCounter struct{ sends atomic.Int64 }

func (c *sendCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.sends.Add(1)
	return ctx
}
func (c *sendCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *sendCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.sends.Add(1)
	return ctx
}
func (c *sendCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *sendCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// countedStore opens a Store on the fixture's table whose pool counts what
// it sends.
func (f txFixture) countedStore(t *testing.T) (*idem.Store, *sendCounter) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(needServer(t))
	require.NoError(t, err)
	c := &sendCounter{}
	cfg.ConnConfig.Tracer = c
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	b := newBackend(t, p, &pgstore.Options{Table: f.table})
	return newStore(t, b, &idem.Options{SweepInterval: -1}), c
}

// DoTx with one INSERT sends what Do with a separate INSERT sends: the
// claim, the INSERT (carrying BEGIN), the completion (carrying COMMIT).
func TestDoTx_ThreeSends(t *testing.T) {
	f := newTxFixture(t)
	s, c := f.countedStore(t)
	c.sends.Store(0)
	_, _, err := idem.DoTx(ctx, s, req("three"), func(ctx context.Context, tx pgx.Tx) (idem.Result, error) {
		return result("ok"), f.insert(ctx, tx, "three", "a")
	})
	require.NoError(t, err)
	require.EqualValues(t, 3, c.sends.Load())
	require.Equal(t, []string{"a"}, f.rows(t, "three"))

	// An effect that writes nothing: the claim and the completion.
	c.sends.Store(0)
	_, _, err = idem.DoTx(ctx, s, req("none"), func(context.Context, pgx.Tx) (idem.Result, error) {
		return result("nothing"), nil
	})
	require.NoError(t, err)
	require.EqualValues(t, 2, c.sends.Load())
	rec, err := s.Get(ctx, "", "none")
	require.NoError(t, err)
	require.Equal(t, idem.StateDone, rec.State)
}

// Every way fn can start the transaction leaves its writes in it: they
// commit with the record, and roll back when the claim is released.
func TestDoTx_FirstCallKinds(t *testing.T) {
	f := newTxFixture(t)
	s := f.store(t, nil)
	ins := "INSERT INTO " + f.ledger + " (key, executor) VALUES ($1, $2)"
	first := map[string]func(ctx context.Context, tx pgx.Tx, key string) error{
		"query": func(ctx context.Context, tx pgx.Tx, key string) error {
			rows, err := tx.Query(ctx, ins+" RETURNING executor", key, "query")
			if err != nil {
				return err
			}
			// Read to the end without Close, as pgx allows.
			for rows.Next() {
			}
			return rows.Err()
		},
		"queryrow": func(ctx context.Context, tx pgx.Tx, key string) error {
			var got string
			err := tx.QueryRow(ctx, ins+" RETURNING executor", key, "queryrow").Scan(&got)
			if err == nil && got != "queryrow" {
				t.Errorf("QueryRow scanned %q", got)
			}
			return err
		},
		"batch": func(ctx context.Context, tx pgx.Tx, key string) error {
			b := &pgx.Batch{}
			b.Queue(ins, key, "batch")
			return tx.SendBatch(ctx, b).Close()
		},
		"savepoint": func(ctx context.Context, tx pgx.Tx, key string) error {
			sp, err := tx.Begin(ctx)
			if err != nil {
				return err
			}
			if _, err := sp.Exec(ctx, ins, key, "savepoint"); err != nil {
				return err
			}
			return sp.Commit(ctx)
		},
		"copy": func(ctx context.Context, tx pgx.Tx, key string) error {
			_, err := tx.CopyFrom(ctx, pgx.Identifier{server.schema, f.table + "_ledger"}, []string{"key", "executor"},
				pgx.CopyFromRows([][]any{{key, "copy"}}))
			return err
		},
	}
	for name, write := range first {
		t.Run(name, func(t *testing.T) {
			_, _, err := idem.DoTx(ctx, s, req(name), func(ctx context.Context, tx pgx.Tx) (idem.Result, error) {
				if err := write(ctx, tx, name); err != nil {
					return idem.Result{}, err
				}
				// A second statement in the same transaction.
				_, err := tx.Exec(ctx, ins, name, "second")
				return result(name), err
			})
			require.NoError(t, err)
			require.Equal(t, []string{name, "second"}, f.rows(t, name))

			key := name + "-released"
			_, _, err = idem.DoTx(ctx, s, req(key), func(ctx context.Context, tx pgx.Tx) (idem.Result, error) {
				return idem.Result{Status: 500}, write(ctx, tx, key)
			})
			require.NoError(t, err)
			require.Empty(t, f.rows(t, key))
			rec, err := s.Get(ctx, "", key)
			require.NoError(t, err)
			require.Equal(t, idem.StateReleased, rec.State)
		})
	}
}

// fn cannot end DoTx's transaction: a deferred Rollback, as pgx code
// often has, and a Commit both return ErrTxOwned and change nothing.
func TestDoTx_FnCannotEndTransaction(t *testing.T) {
	f := newTxFixture(t)
	s := f.store(t, nil)
	_, _, err := idem.DoTx(ctx, s, req("own"), func(ctx context.Context, tx pgx.Tx) (res idem.Result, err error) {
		defer func() { require.ErrorIs(t, tx.Rollback(ctx), pgstore.ErrTxOwned) }()
		if err := f.insert(ctx, tx, "own", "a"); err != nil {
			return idem.Result{}, err
		}
		require.ErrorIs(t, tx.Commit(ctx), pgstore.ErrTxOwned)
		return result("ok"), nil
	})
	require.NoError(t, err)
	require.Equal(t, []string{"a"}, f.rows(t, "own"))
}

// A claim fn takes itself, with plain Do on the same store, is not
// marked: only DoTx's own claim is transactional.
func TestDoTx_NestedDoIsNotMarked(t *testing.T) {
	f := newTxFixture(t)
	s := f.store(t, nil)
	_, _, err := idem.DoTx(ctx, s, req("outer"), func(ctx context.Context, tx pgx.Tx) (idem.Result, error) {
		rec, err := s.Get(ctx, "", "outer")
		require.NoError(t, err)
		require.Equal(t, "transactional", rec.Attempts[len(rec.Attempts)-1].Reason)
		_, _, err = s.Do(ctx, req("inner"), func(ctx context.Context) (idem.Result, error) {
			rec, err := s.Get(ctx, "", "inner")
			require.NoError(t, err)
			require.Empty(t, rec.Attempts[len(rec.Attempts)-1].Reason)
			return result("inner"), nil
		})
		return result("outer"), err
	})
	require.NoError(t, err)
}

// A completion refused by the fence aborts the transaction it was sent in
// with its COMMIT, on the extended protocol and on the simple one (a pool
// behind PgBouncer in transaction mode), whatever fn's first call was: the
// effect's writes roll back and DoTx returns the fenced error.
func TestDoTx_FencedCommitRollsBack(t *testing.T) {
	for _, simple := range []bool{false, true} {
		t.Run(map[bool]string{false: "extended", true: "simple"}[simple], func(t *testing.T) {
			f := newTxFixture(t)
			cfg, err := pgxpool.ParseConfig(needServer(t))
			require.NoError(t, err)
			if simple {
				cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
			}
			p, err := pgxpool.NewWithConfig(ctx, cfg)
			require.NoError(t, err)
			t.Cleanup(p.Close)
			b := newBackend(t, p, &pgstore.Options{Table: f.table})
			s := newStore(t, b, &idem.Options{SweepInterval: -1})

			// Recovery by another instance, in effect: the claim is released
			// under fn, which then writes and returns.
			recoverUnder := func(ctx context.Context) {
				c, ok := idem.ClaimFromContext(ctx)
				require.True(t, ok)
				require.NoError(t, b.Release(ctx, c.Scope(), c.Key(), c.Token(), backend.Releasing{At: epoch, ExpiresAt: epoch.Add(retention), Reason: "test"}))
			}
			for _, first := range []string{"exec", "none"} {
				key := "fenced-" + first
				_, _, err := idem.DoTx(ctx, s, req(key), func(ctx context.Context, tx pgx.Tx) (idem.Result, error) {
					recoverUnder(ctx)
					if first == "none" {
						return result("nothing"), nil
					}
					return result("late"), f.insert(ctx, tx, key, "late")
				})
				require.ErrorIs(t, err, idem.ErrFenced, first)
				require.Empty(t, f.rows(t, key))
				rec, err := s.Get(ctx, "", key)
				require.NoError(t, err)
				require.Equal(t, idem.StateReleased, rec.State)
			}
			// The connection went back to the pool usable.
			_, _, err = idem.DoTx(ctx, s, req("after"), func(ctx context.Context, tx pgx.Tx) (idem.Result, error) {
				return result("ok"), f.insert(ctx, tx, "after", "a")
			})
			require.NoError(t, err)
			require.Equal(t, []string{"a"}, f.rows(t, "after"))
		})
	}
}
