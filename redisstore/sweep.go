package redisstore

import (
	"context"
	"sort"
	"strconv"
	"time"

	"github.com/idemkit/idem/backend"
	"github.com/redis/go-redis/v9"
)

// due reads up to limit members of each shard's index (stale or exp)
// with a score not after now: a bounded batch per shard, in one round
// trip.
func (b *Backend) due(ctx context.Context, index func(keys) string, now time.Time, limit int) ([]keys, error) {
	cmds := make([]*redis.StringSliceCmd, Shards)
	_, err := b.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for n := range Shards {
			cmds[n] = p.ZRangeByScore(ctx, index(b.shardKeys(n, "")), &redis.ZRangeBy{
				Min: "-inf", Max: strconv.FormatInt(now.UnixMilli(), 10), Count: int64(limit)})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []keys
	for n, c := range cmds {
		for _, m := range c.Val() {
			out = append(out, b.shardKeys(n, m))
		}
	}
	return out, nil
}

// Stale implements backend.Backend. Each shard's stale index holds its
// open claims that do not need attention, scored by when they are due
// (the later of the lease end and the next check): Stale reads up to
// limit due members of each and then their records, so its cost follows
// the number of open claims, never of done records.
func (b *Backend) Stale(ctx context.Context, now time.Time, limit int) ([]*backend.Record, error) {
	if err := b.check(ctx); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, nil
	}
	ks, err := b.due(ctx, func(k keys) string { return k.stale }, now, limit)
	if err != nil || len(ks) == 0 {
		return nil, backend.Unavailable("stale", err)
	}
	recs, errs, err := b.readMany(ctx, ks)
	if err != nil {
		return nil, backend.Unavailable("stale", err)
	}
	var out []*backend.Record
	for i, s := range recs {
		r := s.rec
		if r == nil && errs[i] == nil {
			// Deleted by hand: its entry would hold a place in every batch.
			_ = delScript.Run(ctx, b.c, []string{ks[i].rec, ks[i].stale, ks[i].exp}, "0", ks[i].member).Err()
			continue
		}
		if r != nil && r.Stale(now) && !now.Before(r.NextCheck) && !r.Attention {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].LeaseEnds.Before(out[j].LeaseEnds) })
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// Reclaim implements backend.Backend. The server deletes a done or
// released record by itself once its TTL runs out (its retention from the
// write, plus Options.ExpiryMargin): Reclaim deletes those the store's
// clock finds expired before that, through each shard's expiry index, and
// drops the index entries of records the server already deleted, which
// it does not return.
func (b *Backend) Reclaim(ctx context.Context, now time.Time, limit int) ([]backend.Ref, error) {
	if err := b.check(ctx); err != nil {
		return nil, err
	}
	var refs []backend.Ref
	for len(refs) < limit {
		ks, err := b.due(ctx, func(k keys) string { return k.exp }, now, limit-len(refs))
		if err != nil {
			return refs, backend.Unavailable("reclaim", err)
		}
		if len(ks) == 0 {
			break
		}
		recs, errs, err := b.readMany(ctx, ks)
		if err != nil {
			return refs, backend.Unavailable("reclaim", err)
		}
		// An entry whose record is not yet expired by the nanosecond (the
		// index keeps milliseconds) stays: a pass that settles no entry
		// ends the call.
		settled := 0
		for i, k := range ks {
			if len(refs) == limit {
				break
			}
			s := recs[i]
			// A corrupt record is left for an operator; its index entries
			// go, so that it cannot stall reclamation. So do those of a
			// record the server deleted.
			if errs[i] != nil {
				_ = b.c.ZRem(ctx, k.exp, k.member).Err()
				settled++
				continue
			}
			r := s.rec
			if r != nil && (r.State == backend.StateInProgress || now.Before(r.ExpiresAt)) {
				continue // the scripts keep its index entry current
			}
			n, err := delScript.Run(ctx, b.c, []string{k.rec, k.stale, k.exp}, s.ver, k.member).Int()
			if err != nil {
				return refs, backend.Unavailable("reclaim", err)
			}
			settled++
			if n == 1 {
				refs = append(refs, backend.Ref{Scope: r.Scope, Key: r.Key, Token: r.Token})
			}
		}
		if settled == 0 {
			break
		}
	}
	return refs, nil
}
