package main

import (
	"context"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/redisstore"
	"github.com/redis/go-redis/v9"
)

// idemRedisContender returns idem on its Redis backend (redisstore) when
// a server is available: Durable, so the server must have appendfsync
// always (the suite sets it on the server it started).
func idemRedisContender(srv *Servers) Contender {
	c := Contender{
		Name: "idem-redis", Kind: "idem", Durable: true,
		Config: "idem.New over redisstore.New (github.com/idemkit/idem/redisstore) Durable, on a go-redis v9.23.0 " +
			"client (pool of 40); Redis with appendonly yes, appendfsync always (every write fsynced before its reply)",
	}
	if srv.RedisAddr == "" {
		c.Skip = srv.RedisNote
		return c
	}
	c.Open = func(ctx context.Context, ns string) (Store, error) {
		prefix := tableFor("ir", ns)
		st, err := newIdemStore(func(load bool) (*idem.Store, func() error, error) {
			rdb := redis.NewClient(&redis.Options{Addr: srv.RedisAddr, PoolSize: 40})
			d := backend.Durable
			if srv.RedisManaged {
				// The untimed loads of the retained-keys workload run
				// with appendfsync no, as the Redis peer's do.
				fsync := "always"
				if load {
					fsync, d = "no", backend.Fast
				}
				if err := rdb.ConfigSet(ctx, "appendfsync", fsync).Err(); err != nil {
					_ = rdb.Close()
					return nil, nil, err
				}
			}
			b, err := redisstore.New(ctx, rdb, &redisstore.Options{Prefix: prefix, Durability: d})
			if err != nil {
				_ = rdb.Close()
				return nil, nil, err
			}
			o := idemOptions(idem.Durable, benchResult)
			o.RecoveryGrace = -1 // as idem-pg: the sweep is measured, not a live instance's grace
			s := idem.New(b, o)
			return s, func() error { err := s.Close(); _ = rdb.Close(); return err }, nil
		}, time.Millisecond)
		if err != nil {
			return nil, err
		}
		return &idemRedisStore{idemStore: st, addr: srv.RedisAddr, prefix: prefix}, nil
	}
	return c
}

// idemRedisStore is idem on Redis: the server holds its memory and disk.
type idemRedisStore struct {
	*idemStore
	addr, prefix string
}

// Drop implements Dropper: it unlinks the store's keys (every shard's,
// the token hashes among them, the layout, and the token counter of
// layout 1).
func (s *idemRedisStore) Drop(ctx context.Context) error {
	rdb := redis.NewClient(&redis.Options{Addr: s.addr})
	defer rdb.Close()
	for _, pattern := range []string{"{" + s.prefix + ":*}*", s.prefix + ":tokens", s.prefix + ":layout"} {
		var cursor uint64
		for {
			keys, next, err := rdb.Scan(ctx, cursor, pattern, 1000).Result()
			if err != nil {
				return err
			}
			if len(keys) > 0 {
				if err := rdb.Unlink(ctx, keys...).Err(); err != nil {
					return err
				}
			}
			if cursor = next; cursor == 0 {
				break
			}
		}
	}
	return nil
}

// FreshReplays implements FreshReplayer: each pass over the keys gets a
// Store of its own on the same prefix (a new redisstore.Backend on the
// same client), so that no Begin finds its key in the Store's replay
// cache and every replay reads Redis.
func (s *idemRedisStore) FreshReplays(ctx context.Context) (begin func(ctx context.Context, pass int, key, fp string) (Attempt, error), done func() error) {
	rdb := s.store().Backend().(*redisstore.Backend).Client()
	return freshReplays(func() (*idem.Store, error) {
		b, err := redisstore.New(ctx, rdb, &redisstore.Options{Prefix: s.prefix})
		if err != nil {
			return nil, err
		}
		o := idemOptions(idem.Durable, benchResult)
		o.RecoveryGrace = -1
		return idem.New(b, o), nil
	})
}
