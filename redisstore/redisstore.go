package redisstore

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/backend"
	"github.com/redis/go-redis/v9"
)

// Defaults for zero Options fields.
const (
	DefaultPrefix         = "idem"
	DefaultExpiryMargin   = time.Minute
	DefaultReplicaTimeout = time.Second
)

// Shards is the number of slots a store's keys are spread over: every key
// of one shard carries the hash tag {prefix:n}, so a record, its shard's
// indexes and its shard's version counter sit in one Redis Cluster slot
// and one script may touch them all. It is fixed: a store written with
// one number of shards cannot be read with another.
const Shards = 16

// Options configure a Backend. Nil Options, and every zero field, mean the
// documented default.
type Options struct {
	// Prefix starts every key the store writes. Two stores on one server
	// are separate when their prefixes are. Default "idem"; it may not hold
	// '{' or '}' (the hash tags are the Backend's).
	Prefix string

	// Durability is backend.Durable (the default) or backend.Fast. A
	// Durable Backend refuses to open unless every primary it reaches has
	// appendonly yes and appendfsync always, so that a write is in the
	// append-only file and fsynced before the server answers it, and
	// maxmemory-policy noeviction, so that no record is evicted to make
	// room; a Fast one opens on any server (see the package doc for what
	// it may lose).
	Durability backend.Durability

	// Replicas, when above zero, makes every write wait (WAIT) until that
	// many replicas acknowledged it; a write fewer replicas acknowledged in
	// ReplicaTimeout fails with an error wrapping backend.ErrUnavailable
	// (it may still have been applied on the primary). Default 0: the
	// primary's answer suffices. Not for a Redis Cluster client.
	Replicas int

	// ReplicaTimeout bounds WAIT. Default 1 second.
	ReplicaTimeout time.Duration

	// ExpiryMargin is how long after a done or released record stops
	// counting (its ExpiresAt) the server deletes it by itself: the key's
	// TTL is its retention, measured on the server's clock from the write,
	// plus this margin, so that a server clock running a little fast never
	// deletes a record the store still replays. Default 1 minute.
	ExpiryMargin time.Duration
}

// Backend is a backend.Backend storing records in Redis or Valkey. It is
// safe for concurrent use, and any number of Backends in any number of
// processes may share one server (and Prefix).
type Backend struct {
	c        redis.UniversalClient
	owned    bool // Close closes c
	prefix   string
	replicas int
	waitMS   int64
	margin   time.Duration
	durable  bool // Options.Durability is Durable: Maintain checks the server again
	closed   atomic.Bool
	// refusal is the error of the latest check of a Durable Backend's
	// server that found it no longer keeps writes durably (nil when it
	// does): Claim refuses new claims with it until a check passes.
	refusal atomic.Pointer[error]
	claims  claimCache // the open claims this Backend made
	// nonces starts every Claim call's nonce (random, so no other
	// Backend's call shares it); calls numbers the calls.
	nonces string
	calls  atomic.Uint64
	// found is above zero while Claim has lately found records more
	// often than it claimed (noteFound).
	found      atomic.Int32
	shardNames [Shards]shardNames // written once by New
}

var (
	_ backend.Backend       = (*Backend)(nil)
	_ backend.Lister        = (*Backend)(nil)
	_ backend.Tallier       = (*Backend)(nil)
	_ backend.Holder        = (*Backend)(nil)
	_ backend.LateCompleter = (*Backend)(nil)
	_ backend.Maintainer    = (*Backend)(nil)
)

// New returns a Backend on the caller's client, after checking that the
// server can keep what opts.Durability promises: a Durable Backend on a
// server without appendonly yes and appendfsync always returns an error
// wrapping ErrNotDurable that names the setting. It returns an error
// wrapping backend.ErrUnavailable when the server cannot be reached.
//
// The client stays the caller's: Close does not close it.
func New(ctx context.Context, c redis.UniversalClient, opts *Options) (*Backend, error) {
	if c == nil {
		return nil, errors.New("redisstore: New with a nil client")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if strings.ContainsAny(o.Prefix, "{}") {
		return nil, fmt.Errorf("redisstore: prefix %q holds '{' or '}'", o.Prefix)
	}
	if o.ReplicaTimeout <= 0 {
		o.ReplicaTimeout = DefaultReplicaTimeout
	}
	if o.ExpiryMargin <= 0 {
		o.ExpiryMargin = DefaultExpiryMargin
	}
	if _, ok := c.(*redis.ClusterClient); ok && o.Replicas > 0 {
		return nil, errors.New("redisstore: Replicas needs a client of one primary, not a Cluster client")
	}
	b := &Backend{c: c, prefix: o.Prefix, replicas: o.Replicas,
		waitMS: o.ReplicaTimeout.Milliseconds(), margin: o.ExpiryMargin, durable: o.Durability == backend.Durable,
		nonces: rand.Text()[:16] + ":"}
	b.nameShards()
	if err := b.c.Ping(ctx).Err(); err != nil {
		return nil, backend.Unavailable("open", err)
	}
	if o.Durability == backend.Durable {
		if err := checkDurable(ctx, c); err != nil {
			return nil, err
		}
	}
	if err := b.checkLayout(ctx); err != nil {
		return nil, err
	}
	return b, nil
}

// Layout is the version of the key layout this release writes (the
// CHANGELOG's formats on disk): New records it under prefix:layout, and
// refuses a store whose layout is another. Layout 2 writes a claim's
// token in field t alone, drawn from the shard's token hash; it reads
// layout 1's records unchanged, and New moves a layout 1 store to 2, so
// that a release that writes layout 1 refuses it from then on.
const Layout = 2

// checkLayout records the layout of a new store, moves a layout 1 store
// to 2, and refuses another. A replica, which refuses writes, is read as
// it is.
func (b *Backend) checkLayout(ctx context.Context) error {
	k := b.prefix + ":layout"
	got, err := b.c.Get(ctx, k).Int()
	if errors.Is(err, redis.Nil) {
		err = b.c.SetNX(ctx, k, Layout, 0).Err()
		if err == nil {
			got, err = b.c.Get(ctx, k).Int()
		}
	}
	if err == nil && got == 1 {
		if err = b.c.Set(ctx, k, Layout, 0).Err(); err == nil {
			got = Layout
		}
	}
	if redis.HasErrorPrefix(err, "READONLY") {
		return nil
	}
	if err != nil {
		return backend.Unavailable("open", err)
	}
	if got != Layout {
		return fmt.Errorf("%w: the keys under prefix %q have layout %d; this release reads layouts 1 and %d", ErrLayout, b.prefix, got, Layout)
	}
	return nil
}

// Open connects to the server of a redis:// or rediss:// URL (as
// redis.ParseURL reads it) and returns a Backend on it, as New does. The
// client is the Backend's: Close closes it.
func Open(ctx context.Context, url string, opts *Options) (*Backend, error) {
	ro, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	c := redis.NewClient(ro)
	b, err := New(ctx, c, opts)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	b.owned = true
	return b, nil
}

// checkDurable reads appendonly and appendfsync from every primary c
// reaches.
func checkDurable(ctx context.Context, c redis.UniversalClient) error {
	check := func(ctx context.Context, n redis.UniversalClient) error {
		want := [][2]string{{"appendonly", "yes"}, {"appendfsync", "always"}, {"maxmemory-policy", "noeviction"}}
		for _, w := range want {
			got, err := n.ConfigGet(ctx, w[0]).Result()
			if err != nil {
				return fmt.Errorf("%w: cannot read the server's %s (%v): open with Durability Fast, or allow CONFIG GET", ErrNotDurable, w[0], err)
			}
			if v := got[w[0]]; v != w[1] {
				return fmt.Errorf("%w: the server has %s %s, Durable needs %s %s (or open with Durability Fast)", ErrNotDurable, w[0], v, w[0], w[1])
			}
		}
		return nil
	}
	if cc, ok := c.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return check(ctx, n) })
	}
	return check(ctx, c)
}

// Prefix returns the prefix of the store's keys (Options.Prefix).
func (b *Backend) Prefix() string { return b.prefix }

// Maintain implements backend.Maintainer: the Store's background sweep
// calls it. A Durable Backend reads its server's settings again: while
// they no longer keep writes durably (a CONFIG SET appendfsync everysec
// since it opened, or a restart with another configuration), Claim
// refuses new claims with an error wrapping backend.ErrUnavailable and
// ErrNotDurable, and Maintain returns that error; once they do again,
// claims go on. Completions of claims already made go on either way.
func (b *Backend) Maintain(ctx context.Context) error {
	if err := b.check(ctx); err != nil || !b.durable {
		return err
	}
	err := checkDurable(ctx, b.c)
	switch {
	case errors.Is(err, ErrNotDurable):
		err = fmt.Errorf("%w: new claims refused: %w", backend.ErrUnavailable, err)
		b.refusal.Store(&err)
		return err
	case err != nil:
		return backend.Unavailable("check the server's settings", err)
	}
	b.refusal.Store(nil)
	return nil
}

// refused returns the error Claim refuses new claims with, or nil.
func (b *Backend) refused() error {
	if p := b.refusal.Load(); p != nil {
		return *p
	}
	return nil
}

// Client returns the client the Backend was made with.
func (b *Backend) Client() redis.UniversalClient { return b.c }

// Close ends the Backend: later calls fail with an error wrapping
// backend.ErrClosed. It closes the client only if Open made it.
func (b *Backend) Close() error {
	if b.closed.Swap(true) || !b.owned {
		return nil
	}
	return b.c.Close()
}

// keys are the Redis keys of one record and of its shard.
type keys struct {
	rec, stale, exp, ver, tok string
	member                    string // the record's member in the shard's indexes
	shard                     int
}

// keysOf names the keys of (scope, key). A zero byte, which neither a
// scope nor a key may hold, separates them. The shard is the member's
// 32-bit FNV-1a hash modulo Shards.
func (b *Backend) keysOf(scope, key string) keys {
	member := scope + "\x00" + key
	h := uint32(2166136261) // FNV-1a, as hash/fnv's New32a, without its allocation
	for i := 0; i < len(member); i++ {
		h ^= uint32(member[i])
		h *= 16777619
	}
	return b.shardKeys(int(h%Shards), member)
}

// shardNames are the names of one shard's keys, made once by New: every
// call names its record's keys from them.
type shardNames struct {
	rec, stale, exp, ver, tok string // rec: the records' names before the member
}

func (b *Backend) shardKeys(shard int, member string) keys {
	s := &b.shardNames[shard]
	return keys{rec: s.rec + member, stale: s.stale, exp: s.exp, ver: s.ver, tok: s.tok, member: member, shard: shard}
}

// nameShards fills b.shardNames.
func (b *Backend) nameShards() {
	for n := range Shards {
		tag := "{" + b.prefix + ":" + strconv.Itoa(n) + "}"
		b.shardNames[n] = shardNames{rec: tag + ":r:", stale: tag + ":stale", exp: tag + ":exp", ver: tag + ":ver", tok: tag + ":tok"}
	}
}

func (b *Backend) check(ctx context.Context) error {
	if b.closed.Load() {
		return backend.ErrClosed
	}
	return ctx.Err()
}
