package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/idemadmin"
	"github.com/idemkit/idem/idemproxy"
	"github.com/idemkit/idem/pgstore"
	"github.com/idemkit/idem/redisstore"
	"github.com/jackc/pgx/v5/pgxpool"
)

// serveFlags are the flags both proxies take: the store, the scope, the
// resolver, encryption keys, the admin listener, retention, the recovery
// grace and shutdown.
type serveFlags struct {
	fs                         *flag.FlagSet
	dir, scope, resolver, keys string
	admin, killAt              string
	retention, shutdown, grace time.Duration
	decisions                  idemadmin.Decisions // the admin page's recent sweep decisions
}

// addServeFlags defines the shared flags on fs; scopeUsage is -scope's.
func (f *serveFlags) addServeFlags(fs *flag.FlagSet, scopeUsage string) {
	f.fs = fs
	fs.StringVar(&f.dir, "dir", "", "the store: a `directory`, a redis:// URL or a postgres:// URL, if not given as the first argument")
	fs.StringVar(&f.scope, "scope", "", scopeUsage)
	fs.StringVar(&f.resolver, "resolver", "", "`URL` asked about stale claims (docs/proxy.md); without it they are held for an operator")
	fs.DurationVar(&f.retention, "retention", 0, "how long answers are kept for replay (default the store's, 24h)")
	fs.DurationVar(&f.grace, "recovery-grace", 0, "how long a call whose outcome is unknown waits, past its lease, before the resolver is asked: a write still held in the network may land meanwhile (default the lease, 30s)")
	fs.StringVar(&f.keys, "keys", "", keysUsage)
	fs.StringVar(&f.admin, "admin", "", "also serve idemadmin's page and JSON on `host:port`, behind a token printed at start")
	fs.DurationVar(&f.shutdown, "shutdown-timeout", 30*time.Second, "on SIGINT or SIGTERM, how long in-flight requests may finish; those left are held for recovery")
	fs.StringVar(&f.killAt, "kill-at", "", "SIGKILL the process at the first guarded request reaching this point (hidden)")
}

// parseServe parses args and takes the store directory (optional when
// dirOptional); it reads $IDEM_KEYS when -keys is not given.
func (f *serveFlags) parseServe(args []string, dirOptional bool) error {
	pos, err := parseAnywhere(f.fs, args)
	if err != nil {
		return err
	}
	if f.dir, _, err = takeDir(f.fs, f.dir, pos, []string{"DIR"}, dirOptional); err != nil {
		return err
	}
	if f.keys == "" {
		f.keys = os.Getenv(keysEnv)
	}
	return nil
}

// openProxyStore opens the store a proxy serves from: idemproxy.Policy,
// the -resolver URL's HTTPResolver or else HoldResolver, logger, and the
// admin page's decisions as its observer.
func (f *serveFlags) openProxyStore(ctx context.Context, logger *slog.Logger) (*idem.Store, error) {
	var res idem.Resolver = idemproxy.HoldResolver{}
	if f.resolver != "" {
		res = &idemproxy.HTTPResolver{URL: f.resolver}
	}
	return openServingStore(ctx, f.dir, f.keys, &idem.Options{Policy: idemproxy.Policy, Resolver: res,
		Logger: logger, Observer: &f.decisions, Retention: f.retention, RecoveryGrace: f.grace})
}

// killer returns the hook -kill-at asks for: it SIGKILLs the process at
// that point. It returns nil without -kill-at.
func (f *serveFlags) killer() func(idemproxy.Point) {
	if f.killAt == "" {
		return nil
	}
	point := idemproxy.Point(f.killAt)
	return func(p idemproxy.Point) {
		if p == point {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way
		}
	}
}

// openServingStore opens the store a long-running command (the proxies)
// serves from, for writing, with the background sweep on: target is a
// directory (the embedded store, created if missing), a redis:// URL
// (prefix=P in its query as for the operator commands; opened Durable, so a
// server that cannot keep its writes is refused) or a postgres:// URL
// (pgstore, its table in the URL's search_path). keys lists the key files
// for encryption at rest (keys.go). opts are the store's other options.
func openServingStore(ctx context.Context, target, keys string, opts *idem.Options) (*idem.Store, error) {
	ring, err := loadKeys(ctx, keys)
	if err != nil {
		return nil, err
	}
	o := *opts
	o.Keys = ring
	switch {
	case isRedisURL(target):
		u, err := url.Parse(target)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", target, err)
		}
		q := u.Query()
		ro := &redisstore.Options{Prefix: q.Get("prefix"), Durability: backend.Durable}
		q.Del("prefix")
		u.RawQuery = q.Encode()
		octx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		b, err := redisstore.Open(octx, u.String(), ro)
		if err != nil {
			return nil, err
		}
		return idem.New(b, &o), nil
	case isPostgresURL(target):
		octx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		pool, err := pgxpool.New(octx, target)
		if err != nil {
			return nil, err
		}
		b, err := pgstore.New(octx, pool, nil)
		if err != nil {
			pool.Close()
			return nil, err
		}
		return idem.New(poolCloser{b, pool}, &o), nil
	}
	return idem.Open(target, &o)
}

// isPostgresURL reports whether a store argument names a PostgreSQL server.
func isPostgresURL(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

// poolCloser is pgstore's backend that also closes the pool the command
// made for it (pgstore leaves a caller's pool open).
type poolCloser struct {
	*pgstore.Backend
	pool *pgxpool.Pool
}

func (p poolCloser) Close() error {
	err := p.Backend.Close()
	p.pool.Close()
	return err
}
