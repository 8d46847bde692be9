package redisstore_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/redisstore"
	"github.com/idemkit/idem/redisstore/redistest"
	"github.com/redis/go-redis/v9"
)

var ctx = context.Background()

// server is the redis-server every test shares (appendfsync always),
// started by TestMain; nil when none could be started and the tests skip.
var (
	server    *redistest.Server
	serverErr error
	prefixes  atomic.Int64
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if os.Getenv(crashEnvChild) != "" {
		return m.Run() // a crash child: the parent's server is the one it uses
	}
	server, serverErr = redistest.Start(ctx, nil)
	if server != nil {
		defer server.Stop()
	}
	return m.Run()
}

// needServer returns the shared server, or skips the test when there is
// none; with IDEM_REQUIRE_REDIS=1 it fails instead.
func needServer(tb testing.TB) *redistest.Server {
	tb.Helper()
	if server == nil {
		if os.Getenv("IDEM_REQUIRE_REDIS") == "1" {
			tb.Fatalf("IDEM_REQUIRE_REDIS=1 but no redis-server: %v", serverErr)
		}
		tb.Skipf("no redis-server: %v (apt-get install redis-server)", serverErr)
	}
	return server
}

// client returns a client of the shared server, closed when tb ends.
func client(tb testing.TB) *redis.Client {
	c := needServer(tb).Client()
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// newBackend returns a Backend on the shared server under a prefix of its
// own, so every test starts empty.
func newBackend(tb testing.TB, c redis.UniversalClient, opts *redisstore.Options) *redisstore.Backend {
	tb.Helper()
	var o redisstore.Options
	if opts != nil {
		o = *opts
	}
	if o.Prefix == "" {
		o.Prefix = fmt.Sprintf("t%d-%d", os.Getpid(), prefixes.Add(1))
	}
	b, err := redisstore.New(ctx, c, &o)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

var _ backend.Backend = (*redisstore.Backend)(nil)
