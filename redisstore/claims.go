package redisstore

import (
	"context"
	"sync"
	"time"

	"github.com/idemkit/idem/backend"
)

// claimCache keeps the open claims this Backend made, with the version it
// last wrote, so that their completion, release or extension is one round
// trip: the Backend computes the new record from the cached one and
// writes it over the cached version, fenced by the token. When the record
// changed meanwhile (another writer, counts added) the version differs,
// the write changes nothing, and the Backend reads the record and decides
// again, as without the cache.
type claimCache struct {
	mu sync.Mutex // guards m
	// m holds each claim's record, encoded (so that no caller shares
	// it), and its version, by (scope, key, token).
	m map[claimID]cachedClaim
}

// maxCachedClaims bounds the cache: a claim whose holder never completes
// it (a recovered or abandoned one) stays until it is evicted.
const maxCachedClaims = 1 << 14

type claimID struct {
	scope, key string
	token      uint64
}

type cachedClaim struct {
	bytes []byte
	ver   string
}

// put caches rec (in progress) at version ver, as its bytes hold it:
// without the counts its count fields keep (counted).
func (c *claimCache) put(rec *backend.Record, counted backend.Tally, ver string) {
	c.putBytes(rec.Scope, rec.Key, rec.Token, encodeBytes(rec, counted), ver)
}

// putBytes caches the claim of (scope, key, token) encoded as bs, which
// may carry token 0 (as the claim script writes it) or token itself.
func (c *claimCache) putBytes(scope, key string, token uint64, bs []byte, ver string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[claimID]cachedClaim{}
	}
	if len(c.m) >= maxCachedClaims {
		for id := range c.m { // an arbitrary one
			delete(c.m, id)
			break
		}
	}
	c.m[claimID{scope, key, token}] = cachedClaim{bytes: bs, ver: ver}
}

// take removes the claim of (scope, key, token) and returns its record,
// as its bytes hold it, and version.
func (c *claimCache) take(scope, key string, token uint64) (*backend.Record, string, bool) {
	id := claimID{scope, key, token}
	c.mu.Lock()
	e, ok := c.m[id]
	delete(c.m, id)
	c.mu.Unlock()
	if !ok {
		return nil, "", false
	}
	rec, err := backend.DecodeRecord(e.bytes)
	if err != nil {
		return nil, "", false
	}
	if rec.Token == 0 {
		setToken(rec, token)
	}
	return rec, e.ver, true
}

// fencedCached is fencedIn for an open claim this Backend made: it writes
// fn's record over the cached version in one round trip. It reports
// false when the claim is not cached or the record changed since, and
// fencedIn must read it.
func (b *Backend) fencedCached(ctx context.Context, op string, k keys, scope, key string, token uint64,
	fn func(rec *backend.Record) time.Time) (bool, error) {
	rec, ver, ok := b.claims.take(scope, key, token)
	if !ok {
		return false, nil
	}
	ttlFrom := fn(rec)
	res, nv, err := b.put(ctx, k, ver, backend.Tally{}, token, rec, ttlFrom)
	switch {
	case err != nil:
		return true, backend.Unavailable(op, err)
	case res == putFenced:
		return true, &backend.FencedError{Scope: scope, Key: key, Token: token}
	case res == putWritten:
		if rec.State == backend.StateInProgress {
			b.claims.put(rec, backend.Tally{}, nv)
		}
		return true, nil
	}
	return false, nil
}
