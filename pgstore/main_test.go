package pgstore_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/pgstore"
	"github.com/idemkit/idem/pgstore/pgtest"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The tests run against a real PostgreSQL server, never a mock. They take
// it from IDEM_POSTGRES_URL, or start a throwaway cluster of their own when
// PostgreSQL's binaries are installed (Debian's postgresql package: initdb
// and postgres under /usr/lib/postgresql/VERSION/bin, or on PATH). Without
// either they skip, unless IDEM_REQUIRE_POSTGRES=1 (CI) makes them fail.
const (
	envURL     = "IDEM_POSTGRES_URL"
	envRequire = "IDEM_REQUIRE_POSTGRES"
	envHelper  = "IDEM_PGSTORE_HELPER" // set in child processes: what to do
)

// server is the test binary's database: its URL, or why there is none.
var server struct {
	url    string
	schema string // this run's schema: every test's tables live in it
	err    error
}

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if os.Getenv(envHelper) != "" {
		// A child process: the parent passed its URL and schema.
		server.url = os.Getenv(envURL)
		server.schema = os.Getenv("IDEM_PGSTORE_SCHEMA")
		return m.Run()
	}
	var stop func()
	server.url = os.Getenv(envURL)
	if server.url == "" {
		var err error
		server.url, stop, err = startCluster()
		if err != nil {
			server.err = err
		}
	}
	if server.err == nil {
		var err error
		server.schema, err = pgtest.CreateSchema(context.Background(), server.url, "idem_test_")
		if err != nil {
			server.err = fmt.Errorf("cannot use the server at %s: %w", redact(server.url), err)
		}
	}
	code := m.Run()
	if p := sharedPool.Load(); p != nil {
		p.Close()
	}
	if server.err == nil && os.Getenv(envURL) != "" {
		pgtest.DropSchema(server.url, server.schema)
	}
	if stop != nil {
		stop()
	}
	return code
}

// needServer skips the test (or fails it under IDEM_REQUIRE_POSTGRES=1)
// when there is no server, and returns its URL.
func needServer(tb testing.TB) string {
	tb.Helper()
	if server.err != nil {
		msg := fmt.Sprintf("no PostgreSQL server: %v. Set %s=postgres://... to use a server, "+
			"or install PostgreSQL (apt-get install postgresql) so that the tests start their own",
			server.err, envURL)
		if os.Getenv(envRequire) == "1" {
			tb.Fatal(msg)
		}
		tb.Skip(msg)
	}
	return server.url
}

// newPool returns a pool on the test server, closed when the test ends.
func newPool(tb testing.TB, maxConns int32) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(needServer(tb))
	if err != nil {
		tb.Fatal(err)
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

var tableSeq atomic.Int64

// uniqueTable returns a table name no other test of this run uses.
func uniqueTable(prefix string) string {
	return fmt.Sprintf("%s_%d_%d", prefix, os.Getpid(), tableSeq.Add(1))
}

// newBackend returns a Backend on a fresh table of this run's schema. The
// caller (or the Store it is given to) closes it.
func newBackend(tb testing.TB, pool *pgxpool.Pool, opts *pgstore.Options) *pgstore.Backend {
	tb.Helper()
	o := pgstore.Options{}
	if opts != nil {
		o = *opts
	}
	if o.Schema == "" {
		o.Schema = server.schema
	}
	if o.Table == "" {
		o.Table = uniqueTable("t")
	}
	b, err := pgstore.New(context.Background(), pool, &o)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// sharedPool is one pool for the tests that need no pool of their own; it
// lives as long as the test binary.
var sharedPool atomic.Pointer[pgxpool.Pool]

func pool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	needServer(tb)
	if p := sharedPool.Load(); p != nil {
		return p
	}
	cfg, err := pgxpool.ParseConfig(server.url)
	if err != nil {
		tb.Fatal(err)
	}
	cfg.MaxConns = 16
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	if !sharedPool.CompareAndSwap(nil, p) {
		p.Close()
	}
	return sharedPool.Load()
}

func redact(url string) string {
	if i := strings.Index(url, "@"); i >= 0 {
		if j := strings.Index(url, "://"); j >= 0 && j < i {
			return url[:j+3] + "...@" + url[i+1:]
		}
	}
	return url
}

// startCluster starts a throwaway cluster (see pgtest) and returns its
// URL and a function that stops it and removes its directory.
func startCluster() (url string, stop func(), err error) {
	// fsync is off: the tests kill clients, never the server, and the
	// benchmarks compare the backend with bare pgx on the same server.
	c, err := pgtest.Start(context.Background(), &pgtest.Options{
		NoSync:    true,
		DirPrefix: "pgstore-test-",
		Settings: []string{"fsync=off", "full_page_writes=off", "max_connections=300",
			"shared_buffers=128MB", "log_min_messages=warning"},
	})
	if err != nil {
		return "", nil, err
	}
	return c.URL, c.Stop, nil
}

// newStore wraps b in a Store, closed when the test ends.
func newStore(tb testing.TB, b backend.Backend, o *idem.Options) *idem.Store {
	tb.Helper()
	s := idem.New(b, o)
	tb.Cleanup(func() { _ = s.Close() })
	return s
}
