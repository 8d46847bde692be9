package pgstore_test

import (
	"context"
	"database/sql"
	"time"

	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"
)

// A fenced write through database/sql (idem.ExecFenced) from a paused
// holder is refused once a newer claim of the key wrote: the guard column
// holds the newer token.
func TestExecFenced_PausedHolderRefused(t *testing.T) {
	f := newTxFixture(t)
	accounts := pgx.Identifier{server.schema, f.table + "_accounts"}.Sanitize()
	mustExec(t, "CREATE TABLE "+accounts+" (id text PRIMARY KEY, balance bigint NOT NULL, fence bigint NOT NULL DEFAULT 0)")
	mustExec(t, "INSERT INTO "+accounts+" (id, balance) VALUES ('acc', 100)")
	db := stdlib.OpenDBFromPool(pool(t))
	defer db.Close()
	debit := func(ctx context.Context, db *sql.DB) error {
		_, err := idem.ExecFenced(ctx, db,
			"UPDATE "+accounts+" SET balance = balance - $2, fence = $3 WHERE id = $1 AND fence < $3", "acc", 10)
		return err
	}

	notCommitted := idem.ResolverFunc(func(context.Context, *idem.Record) (idem.Resolution, error) {
		return idem.Resolution{Verdict: idem.VerdictNotCommitted}, nil
	})
	s1 := f.store(t, &idem.Options{Clock: idemtest.NewClock(epoch), Lease: lease, SweepInterval: -1})
	s2 := f.store(t, &idem.Options{Clock: idemtest.NewClock(epoch.Add(time.Hour)), Lease: lease, SweepInterval: -1,
		Resolver: notCommitted})

	claimed, resume := make(chan struct{}), make(chan struct{})
	late := make(chan error, 1)
	go func() {
		_, _, err := s1.Do(ctx, req("k"), func(ctx context.Context) (idem.Result, error) {
			close(claimed)
			<-resume // paused before its write
			return result("late"), debit(ctx, db)
		})
		late <- err
	}()
	<-claimed
	rep, err := s2.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.NotCommitted)
	_, _, err = s2.Do(ctx, req("k"), func(ctx context.Context) (idem.Result, error) {
		return result("second"), debit(ctx, db)
	})
	require.NoError(t, err)

	close(resume)
	require.ErrorIs(t, <-late, idem.ErrFenced)
	var balance int64
	require.NoError(t, pool(t).QueryRow(ctx, "SELECT balance FROM "+accounts+" WHERE id = 'acc'").Scan(&balance))
	require.Equal(t, int64(90), balance, "one debit")

	_, err = idem.ExecFenced(ctx, db, "SELECT 1")
	require.ErrorIs(t, err, idem.ErrNoClaim)
}
