package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// TestDo_HeldWrite_SettlesWithinTheGrace tells the story the nemesis once
// found, on a real server and a real network path. An effect's INSERT
// (unfenced, outside the claim's transaction) goes out through a path that
// holds it; the effect's own timeout ends first, so the Policy holds the
// claim: its outcome is unknown. A repeat at once, in the same process,
// must not ask the Resolver yet, since the INSERT may still land: it is
// told the outcome is unknown. The path then delivers the INSERT and the
// cancel request pgx sent after it when it gave up, and the server either
// commits the INSERT or cancels it, whichever reaches it first. After the
// grace the Resolver sees what happened: a committed INSERT is replayed, a
// cancelled one runs again; either way the ledger holds one row.
func TestDo_HeldWrite_SettlesWithinTheGrace(t *testing.T) {
	px, url := newProxy(t)
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	// One message per statement, so that the held INSERT is whole.
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	effects, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer effects.Close()
	conn, err := effects.Acquire(ctx) // a connection open before the path holds
	require.NoError(t, err)
	backendPID := conn.Conn().PgConn().PID()
	conn.Release()

	direct := pool(t)
	ledger := pgx.Identifier{server.schema, uniqueTable("ledger")}.Sanitize()
	mustExec(t, "CREATE TABLE "+ledger+" (key text NOT NULL, token bigint NOT NULL)")
	rows := func(key string) int {
		var n int
		require.NoError(t, direct.QueryRow(ctx, "SELECT count(*) FROM "+ledger+" WHERE key = $1", key).Scan(&n))
		return n
	}

	const grace = 5 * time.Second
	var asked int
	s := newStore(t, newBackend(t, direct, nil), &idem.Options{
		SweepInterval: -1, Lease: 2 * time.Second, RecoveryGrace: grace,
		Policy: func(res idem.Result, err error) idem.Decision {
			if err != nil {
				return idem.DecisionHold // the INSERT's fate is unknown
			}
			return idem.DefaultPolicy(res, err)
		},
		Resolver: idem.ResolverFunc(func(ctx context.Context, rec *idem.Record) (idem.Resolution, error) {
			asked++
			var token int64
			err := direct.QueryRow(ctx, "SELECT token FROM "+ledger+" WHERE key = $1 ORDER BY token LIMIT 1", rec.Key).Scan(&token)
			if errors.Is(err, pgx.ErrNoRows) {
				return idem.Resolution{Verdict: idem.VerdictNotCommitted}, nil
			}
			if err != nil {
				return idem.Resolution{}, err
			}
			return idem.Resolution{Verdict: idem.VerdictCommitted, Result: idem.Result{Status: 201, Body: fmt.Appendf(nil, "refund %d", token)}}, nil
		}),
	})
	req := idem.Request{Scope: "s", Key: "refund-1", Fingerprint: "fp"}
	ran := 0
	effect := func(ctx context.Context) (idem.Result, error) {
		ran++
		c, _ := idem.ClaimFromContext(ctx)
		wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond) // the downstream call's own timeout
		defer cancel()
		if _, err := effects.Exec(wctx, "INSERT INTO "+ledger+" (key, token) VALUES ($1, $2)", req.Key, int64(c.Token())); err != nil {
			return idem.Result{}, err
		}
		return idem.Result{Status: 201, Body: fmt.Appendf(nil, "refund %d", c.Token())}, nil
	}

	px.hold()
	_, _, err = s.Do(ctx, req, effect)
	require.ErrorIs(t, err, context.DeadlineExceeded, "the INSERT timed out in the held path")
	require.Equal(t, 0, rows(req.Key), "the INSERT is still on its way")

	// At once, in the process that held the claim: not the Resolver yet.
	_, _, err = s.Do(ctx, req, effect)
	var unk *idem.OutcomeUnknownError
	require.ErrorAs(t, err, &unk, "a repeat within the grace")
	require.Equal(t, 0, asked, "the Resolver was asked while the INSERT could still land")
	require.Equal(t, 1, ran)

	px.release()
	// The INSERT and the cancel request reach the server together now; the
	// session ends at the client's Terminate, which follows the cancel.
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, direct.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", backendPID).Scan(&n))
		return n == 0
	}, 10*time.Second, 20*time.Millisecond, "the held INSERT's session did not end")
	landed := rows(req.Key) == 1
	t.Logf("the held INSERT landed: %v (else the cancel request reached it first)", landed)

	// Once the grace is over the Resolver sees what happened.
	require.Eventually(t, func() bool { return time.Now().After(unk.NextCheck) }, 2*grace, 50*time.Millisecond)
	res, replayed, err := s.Do(ctx, req, effect)
	require.NoError(t, err)
	require.Equal(t, 201, res.Status)
	require.Equal(t, 1, asked)
	require.Equal(t, landed, replayed, "replayed when the INSERT had landed, run again when not")
	if landed {
		require.Equal(t, 1, ran, "the effect ran once")
	} else {
		require.Equal(t, 2, ran, "the cancelled effect ran again")
	}
	require.Equal(t, 1, rows(req.Key), "one refund in the ledger")
}
