package main

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/pgstore/pgtest"
	"github.com/idemkit/idem/redisstore/redistest"
)

// twoProxies runs two idem proxy processes' worth of proxies (in-process)
// on the one store target: a key run through the first replays through
// the second, and the upstream ran once.
func twoProxies(t *testing.T, target string) {
	up, runs := countingUpstream(t)
	a := serveProxy(t, target, "-listen", "127.0.0.1:0", "-upstream", up.URL, "-scope", "fixed:refunds")
	b := serveProxy(t, target, "-listen", "127.0.0.1:0", "-upstream", up.URL, "-scope", "fixed:refunds")
	first, body1 := send(t, a.base+"/refunds", `{"order":"o-1"}`, "Idempotency-Key", "k-shared")
	again, body2 := send(t, b.base+"/refunds", `{"order":"o-1"}`, "Idempotency-Key", "k-shared")
	if first.StatusCode != 201 || again.StatusCode != 201 || body1 != body2 || again.Header.Get(idemhttp.HeaderReplayed) != "true" {
		t.Fatalf("through A: %d %s; through B: %d %s %v\n%s%s", first.StatusCode, body1, again.StatusCode, body2,
			again.Header, a.logged(), b.logged())
	}
	if runs.Load() != 1 {
		t.Fatalf("upstream ran %d times, want 1", runs.Load())
	}
}

// TestProxyCommand_Redis serves two proxies from one redis:// store.
func TestProxyCommand_Redis(t *testing.T) {
	srv, err := redistest.Start(context.Background(), nil)
	if errors.Is(err, redistest.ErrNoBinary) && !requireRedis() {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop) // after the proxies stopped
	twoProxies(t, srv.URL()+"?prefix=proxy")
}

// TestProxyCommand_Postgres serves two proxies from one postgres:// store.
func TestProxyCommand_Postgres(t *testing.T) {
	c, err := pgtest.Start(context.Background(), nil)
	if errors.Is(err, pgtest.ErrNoBinaries) && os.Getenv("IDEM_REQUIRE_POSTGRES") != "1" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop) // after the proxies stopped
	twoProxies(t, c.URL)
}
