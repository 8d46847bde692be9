package pgstore_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/pgstore"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// AddTallies locks its rows of counts in (scope, key) order whatever the
// order of the batch and of the rows in the heap: with one row held by
// another transaction, a batch waiting for it holds every row before it
// and none after it. Two batches sharing rows therefore never wait for
// each other in a cycle (a deadlock).
func TestBackend_AddTallies_LocksInKeyOrder(t *testing.T) {
	const keys, held = 100, 50
	b := newBackend(t, pool(t), nil)
	counts := countsTable(b)
	key := func(i int) string { return fmt.Sprintf("k%03d", i) }
	batch := func() []backend.Tally {
		batch := make([]backend.Tally, keys)
		for i, j := range rand.Perm(keys) {
			batch[i] = backend.Tally{Scope: "s", Key: key(j), Replays: 1, LastReplay: epoch}
		}
		return batch
	}
	// Claimed and first counted in random order, so that the heaps'
	// order is not the keys'.
	for _, i := range rand.Perm(keys) {
		_, _, err := b.Claim(ctx, "s", key(i), claimArgs("fp", epoch))
		require.NoError(t, err)
	}
	require.NoError(t, b.AddTallies(ctx, batch()))

	tx, err := pool(t).Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "SELECT 1 FROM "+counts+" WHERE scope = 's' AND key = $1 FOR UPDATE", key(held))
	require.NoError(t, err)

	tallied := make(chan error, 1)
	go func() { tallied <- b.AddTallies(ctx, batch()) }()
	// Poll the server until the batch waits for the held row.
	for {
		var n int
		require.NoError(t, pool(t).QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%unnest%' AND strpos(query, $1) > 0`, tableName(b)).Scan(&n))
		if n == 1 {
			break
		}
		select {
		case err := <-tallied:
			t.Fatalf("the batch ended (%v) while a row it updates was held", err)
		case <-time.After(5 * time.Millisecond):
		}
	}

	for i := range keys {
		if i == held {
			continue
		}
		_, err := pool(t).Exec(ctx, "SELECT 1 FROM "+counts+" WHERE scope = 's' AND key = $1 FOR UPDATE NOWAIT", key(i))
		var pe *pgconn.PgError
		locked := errors.As(err, &pe) && pe.Code == "55P03" // lock_not_available
		if !locked {
			require.NoError(t, err, key(i))
		}
		require.Equal(t, i < held, locked, "row %s locked by the waiting batch", key(i))
	}
	// The records are read, never locked.
	_, err = pool(t).Exec(ctx, "SELECT 1 FROM "+b.Table()+" FOR UPDATE NOWAIT")
	require.NoError(t, err)

	require.NoError(t, tx.Rollback(ctx))
	require.NoError(t, <-tallied)
	require.NoError(t, b.Scan(ctx, func(r *idem.Record) bool {
		require.Equal(t, int64(2), r.Replays, r.Key)
		return true
	}))
}

// countsTable is the quoted, qualified name of b's table of counts.
func countsTable(b *pgstore.Backend) string {
	return pgx.Identifier{server.schema, tableName(b) + "_counts"}.Sanitize()
}
