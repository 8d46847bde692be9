package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/redisstore"
)

// isRedisURL reports whether an operator command's DIR names a Redis or
// Valkey server rather than a directory.
func isRedisURL(s string) bool {
	return strings.HasPrefix(s, "redis://") || strings.HasPrefix(s, "rediss://")
}

// openRedis opens the store on the server of a.dir, a redis:// URL whose
// query may hold prefix=P (redisstore.Options.Prefix; default idem). A
// command that only reads opens it Fast, since it writes nothing whose
// durability the server's settings could betray; one that writes opens it
// Durable, which refuses a server that cannot keep its writes.
func (a *adminFlags) openRedis(write bool, obs idem.Observer) (*idem.Store, error) {
	u, err := url.Parse(a.dir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", a.dir, err)
	}
	q := u.Query()
	opts := &redisstore.Options{Prefix: q.Get("prefix"), Durability: backend.Fast}
	q.Del("prefix")
	u.RawQuery = q.Encode()
	if write {
		opts.Durability = backend.Durable
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := redisstore.Open(ctx, u.String(), opts)
	if err != nil {
		return nil, err
	}
	return idem.New(b, &idem.Options{
		SweepInterval: -1,
		Clock:         a.clock(),
		Observer:      obs,
		CloseTimeout:  time.Second,
	}), nil
}
