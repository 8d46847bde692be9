package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemmcp"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/pgstore"
	"github.com/idemkit/idem/pgstore/pgtest"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// database starts a throwaway PostgreSQL cluster with the refunds table
// and returns a pool on it. Without PostgreSQL's binaries the test skips,
// unless IDEM_REQUIRE_POSTGRES=1 (CI) makes it fail.
func database(t *testing.T) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	c, err := pgtest.Start(ctx, &pgtest.Options{NoSync: true, DirPrefix: "mcp-tx-refunds-"})
	if errors.Is(err, pgtest.ErrNoBinaries) && os.Getenv("IDEM_REQUIRE_POSTGRES") != "1" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	pool, err := pgxpool.New(ctx, c.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(ctx, schema); err != nil {
		t.Fatal(err)
	}
	return pool
}

// instance is one tool server process's store, on its own clock.
func instance(t *testing.T, pool *pgxpool.Pool, clock idem.Clock) *idem.Store {
	t.Helper()
	b, err := pgstore.New(context.Background(), pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := idem.New(b, &idem.Options{Clock: clock, Lease: 30 * time.Second, SweepInterval: -1})
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// session connects a client to server over in-memory transports.
func session(t *testing.T, server *mcp.Server) *mcp.ClientSession {
	t.Helper()
	ct, st := mcp.NewInMemoryTransports()
	ss, err := server.Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "tx-test", Version: "v0"}, nil).Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close(); _ = ss.Wait() })
	return cs
}

func refundCall() *mcp.CallToolParams {
	return idemmcp.WithKey(&mcp.CallToolParams{Name: "refund_order",
		Arguments: map[string]any{"order_id": "o-9", "amount_cents": 900}}, "refund:o-9")
}

// TestAddTxTool_PausedHolderCannotCommit pauses a tool server in the
// middle of refund_order, after it wrote its refund row, until its claim's
// lease has ended; another instance recovers the claim (no Resolver: the
// effect is transactional) and books the refund. When the paused one
// resumes, its commit is refused (fenced), its row rolled back, and its
// caller told taken_over: the database holds one refund.
func TestAddTxTool_PausedHolderCannotCommit(t *testing.T) {
	pool := database(t)
	now := time.Now()
	s1 := instance(t, pool, idemtest.NewClock(now)) // stands still: no heartbeat extends
	s2 := instance(t, pool, idemtest.NewClock(now.Add(31*time.Second)))

	written, resume := make(chan struct{}), make(chan struct{})
	paused := session(t, newServer(s1, func() { close(written); <-resume }))
	other := session(t, newServer(s2, nil))

	answer := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, err := paused.CallTool(context.Background(), refundCall())
		if err != nil {
			t.Error(err)
		}
		answer <- res
	}()
	<-written
	if rep, err := s2.Sweep(context.Background()); err != nil || rep.NotCommitted != 1 {
		t.Fatalf("sweep on the other instance: %+v %v", rep, err)
	}
	second, err := other.CallTool(context.Background(), refundCall())
	if err != nil || second.IsError || idemmcp.Replayed(second) {
		t.Fatalf("the other instance's call: %v %+v", err, second)
	}

	close(resume)
	first := <-answer
	if first == nil || !first.IsError || idemmcp.Status(first) != idemmcp.StatusTakenOver {
		t.Fatalf("the paused call answered %+v, want status %s", first, idemmcp.StatusTakenOver)
	}
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM refunds WHERE order_id = 'o-9'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d refund rows (%v), want 1", n, err)
	}
	// A retry to the paused instance gets the other call's answer.
	again, err := paused.CallTool(context.Background(), refundCall())
	if err != nil || !idemmcp.Replayed(again) {
		t.Fatalf("retry: %v %+v", err, again)
	}
	if a, b := again.StructuredContent, second.StructuredContent; !sameJSON(a, b) {
		t.Fatalf("retry answered %v, the other call %v", a, b)
	}
}

// TestAddTxTool_OnceAndReplayed is the plain path: one refund row per
// key, and the repeat replays it; also on servers where the Guard's
// Middleware protects every write tool, inside or outside AddTxTool's.
func TestAddTxTool_OnceAndReplayed(t *testing.T) {
	pool := database(t)
	store := instance(t, pool, idem.SystemClock())
	guard := idemmcp.New(store, &idemmcp.Options{SharedScope: true})
	inner := mcp.NewServer(&mcp.Implementation{Name: "inner", Version: "v0"}, nil)
	inner.AddReceivingMiddleware(guard.Middleware())
	idemmcp.AddTxTool(guard, inner, refundTool, refund(nil))
	outer := mcp.NewServer(&mcp.Implementation{Name: "outer", Version: "v0"}, nil)
	idemmcp.AddTxTool(guard, outer, refundTool, refund(nil))
	outer.AddReceivingMiddleware(guard.Middleware())
	servers := map[string]*mcp.Server{"plain": newServer(store, nil), "inner": inner, "outer": outer}
	for name, server := range servers {
		cs := session(t, server)
		for i := range 2 {
			params := refundCall()
			params.Meta[idemmcp.MetaKey] = "refund:" + name
			res, err := cs.CallTool(context.Background(), params)
			if err != nil || res.IsError || idemmcp.Replayed(res) != (i == 1) {
				t.Fatalf("%s, call %d: %v %+v", name, i, err, res)
			}
		}
	}
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM refunds`).Scan(&n); err != nil || n != len(servers) {
		t.Fatalf("%d refund rows (%v), want one per key, %d", n, err, len(servers))
	}
}

func sameJSON(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(x) == string(y)
}
