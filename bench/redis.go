package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisContenders returns go-redis on Redis: with appendfsync always
// (durable: the append-only file is fsynced before each reply) and
// appendfsync everysec (Redis's default: up to a second of writes lost on
// a power loss) when the suite started the server; with the configuration
// it has when the server came from $IDEM_REDIS_URL.
func redisContenders(srv *Servers) []Contender {
	desc := func(fsync string) string {
		return "github.com/redis/go-redis/v9 v9.23.0 (pool of 40) on Redis, appendonly yes, appendfsync " + fsync +
			"; one string per key holding the encoded record with a TTL of the retention; Begin is one " +
			"SET key claim NX GET (claims an absent key or returns the stored record in one round trip), " +
			"Complete a SET of the done record"
	}
	mk := func(name, fsync string, durable bool) Contender {
		c := Contender{Name: name, Kind: "peer", Durable: durable, Config: desc(fsync)}
		switch {
		case srv.RedisAddr == "":
			c.Skip = srv.RedisNote
		case srv.RedisManaged:
			c.Open = func(ctx context.Context, ns string) (Store, error) { return openRedis(ctx, srv, ns, fsync) }
		default:
			c.Config = desc("as configured on the server at $" + envRedisURL)
			c.Open = func(ctx context.Context, ns string) (Store, error) { return openRedis(ctx, srv, ns, "") }
		}
		return c
	}
	if srv.RedisAddr != "" && !srv.RedisManaged {
		return []Contender{mk("redis", "", false)}
	}
	everysec := mk("redis-everysec", "everysec", false)
	everysec.SameData = "redis-always"
	return []Contender{mk("redis-always", "always", true), everysec}
}

// redisStore is the Redis peer. Its keys are prefix + key.
type redisStore struct {
	rdb    *redis.Client
	prefix string
	fsync  string // the appendfsync the suite set, empty if none
	dir    string // the server's directory when the suite started it
	// usedBefore is the server's used_memory when the store opened, and
	// aofBefore the size of its append-only files: Footprint reports the
	// growth, since other namespaces share the server.
	usedBefore, aofBefore int64
}

func openRedis(ctx context.Context, srv *Servers, ns, fsync string) (*redisStore, error) {
	rdb := redis.NewClient(&redis.Options{Addr: srv.RedisAddr, PoolSize: 40})
	if fsync != "" {
		if err := rdb.ConfigSet(ctx, "appendfsync", fsync).Err(); err != nil {
			rdb.Close()
			return nil, err
		}
	}
	s := &redisStore{rdb: rdb, prefix: tableFor("r", ns) + ":", dir: srv.RedisDir, fsync: fsync}
	s.usedBefore, _ = s.usedMemory(ctx)
	s.aofBefore = dirBytes(filepath.Join(s.dir, "appendonlydir"))
	return s, nil
}

// Begin implements Claimer.
func (s *redisStore) Begin(ctx context.Context, key, fp string) (Attempt, error) {
	claim := claimRecord(fp, time.Now()).encode()
	old, err := s.rdb.SetArgs(ctx, s.prefix+key, claim, redis.SetArgs{Mode: "NX", Get: true, TTL: retention}).Bytes()
	if errors.Is(err, redis.Nil) {
		return Attempt{Outcome: Claimed, handle: fp}, nil
	}
	if err != nil {
		return Attempt{}, err
	}
	r, err := decodeRecord(old)
	if err != nil {
		return Attempt{}, err
	}
	return attemptOf(r, fp)
}

// Complete implements Claimer.
func (s *redisStore) Complete(ctx context.Context, key string, a Attempt, result []byte) error {
	done := doneRecord(a.handle.(string), result, time.Now()).encode()
	return s.rdb.Set(ctx, s.prefix+key, done, retention).Err()
}

// FreshReplays implements FreshReplayer: the peer keeps no cache, and its
// Begin is a write (SET NX GET); its uncached figure is the read a
// replay needs alone, one GET of the key and the record decoded, the
// floor redisstore's uncached replays are judged against.
func (s *redisStore) FreshReplays(context.Context) (func(ctx context.Context, pass int, key, fp string) (Attempt, error), func() error) {
	begin := func(ctx context.Context, _ int, key, fp string) (Attempt, error) {
		b, err := s.rdb.Get(ctx, s.prefix+key).Bytes()
		if err != nil {
			return Attempt{}, err
		}
		r, err := decodeRecord(b)
		if err != nil {
			return Attempt{}, err
		}
		return attemptOf(r, fp)
	}
	return begin, func() error { return nil }
}

// setAll writes value for every key through pipelines of 1,000 commands.
func (s *redisStore) setAll(ctx context.Context, keys []string, value []byte) error {
	for len(keys) > 0 {
		n := min(len(keys), 1000)
		p := s.rdb.Pipeline()
		for _, k := range keys[:n] {
			p.Set(ctx, s.prefix+k, value, retention)
		}
		if _, err := p.Exec(ctx); err != nil {
			return err
		}
		keys = keys[n:]
	}
	return nil
}

// Fill implements Dataset. On a server the suite started, the untimed
// load runs with appendfsync no; the append-only file it leaves is the
// same.
func (s *redisStore) Fill(ctx context.Context, keys []string, result []byte) error {
	if s.fsync != "" {
		if err := s.rdb.ConfigSet(ctx, "appendfsync", "no").Err(); err != nil {
			return err
		}
		defer s.rdb.ConfigSet(ctx, "appendfsync", s.fsync)
	}
	return s.setAll(ctx, keys, doneRecord(benchFP, result, time.Now()).encode())
}

// Abandon implements Dataset: the claims' leases have just ended.
func (s *redisStore) Abandon(ctx context.Context, keys []string) error {
	r := record{State: stateInProgress, FP: benchFP, LeaseEnds: time.Now().UnixNano()}
	return s.setAll(ctx, keys, r.encode())
}

// Sweep implements Dataset: Redis has no secondary index, so the sweep
// SCANs the namespace and reads every record (MGET per batch). An index
// would be a sorted set of lease ends written in a MULTI with every claim
// and completion.
func (s *redisStore) Sweep(ctx context.Context, result []byte) (int, error) {
	now := time.Now()
	done := doneRecord(benchFP, result, now).encode()
	n := 0
	var cursor uint64
	for {
		keys, next, err := s.rdb.Scan(ctx, cursor, s.prefix+"*", 1000).Result()
		if err != nil {
			return n, err
		}
		if len(keys) > 0 {
			vals, err := s.rdb.MGet(ctx, keys...).Result()
			if err != nil {
				return n, err
			}
			for i, v := range vals {
				str, ok := v.(string)
				if !ok || len(str) == 0 || str[0] != stateInProgress {
					continue
				}
				r, err := decodeRecord([]byte(str))
				if err != nil {
					return n, err
				}
				if r.LeaseEnds < now.UnixNano() {
					if err := s.rdb.Set(ctx, keys[i], done, retention).Err(); err != nil {
						return n, err
					}
					n++
				}
			}
		}
		if cursor = next; cursor == 0 {
			return n, nil
		}
	}
}

// Drop implements Dropper: it unlinks the namespace's keys.
func (s *redisStore) Drop(ctx context.Context) error {
	var cursor uint64
	for {
		keys, next, err := s.rdb.Scan(ctx, cursor, s.prefix+"*", 1000).Result()
		if err != nil {
			return err
		}
		if len(keys) > 0 {
			if err := s.rdb.Unlink(ctx, keys...).Err(); err != nil {
				return err
			}
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

// usedMemory returns the server's used_memory.
func (s *redisStore) usedMemory(ctx context.Context) (int64, error) {
	info, err := s.rdb.Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("redis: no used_memory in INFO")
}

// Footprint implements Footprinter: the growth of the server's
// used_memory and of its append-only file since the store opened.
func (s *redisStore) Footprint(ctx context.Context) (int64, int64, string, error) {
	used, err := s.usedMemory(ctx)
	if err != nil {
		return -1, -1, "", err
	}
	disk := int64(-1)
	note := "memory: growth of the server's used_memory (allocator overhead and RSS not counted)"
	if s.dir != "" {
		disk = dirBytes(filepath.Join(s.dir, "appendonlydir")) - s.aofBefore
		note += "; disk: growth of the append-only file (not rewritten)"
	}
	return used - s.usedBefore, disk, note, nil
}

// Close implements Store.
func (s *redisStore) Close() error { return s.rdb.Close() }

// dirBytes returns the bytes allocated on disk under dir (as du counts
// them), or 0 when it does not exist.
func dirBytes(dir string) int64 {
	var n int64
	_ = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			n += allocated(fi)
		}
		return nil
	})
	return n
}
