package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/pgstore"
	"github.com/idemkit/idem/redisstore"
	"github.com/jackc/pgx/v5/pgxpool"
)

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
