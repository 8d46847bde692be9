package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"github.com/idemkit/idem/backend"
	"github.com/redis/go-redis/v9"
)

// stored is a record as read, with the version its write is checked
// against.
type stored struct {
	rec *backend.Record // nil: no record
	ver string          // "0" when there is no record
	// counted are the counts kept in the record's count fields, which
	// rec includes: a write of rec leaves them out of its bytes, since
	// the fields stay.
	counted backend.Tally
}

// recordFields are the fields a read fetches, in decodeStored's order:
// the bytes, the version, the token, and the counts added beside the
// bytes (replays, conflicts, mismatches, the last replay's and the last
// rejection's times in Unix nanoseconds).
var recordFields = []string{"b", "v", "t", "rp", "cf", "mm", "lr", "lj"}

// read reads the record of k: its fields (recordFields, or claimFields
// for Claim's read first).
func (b *Backend) read(ctx context.Context, k keys, fields []string) (stored, error) {
	vals, err := b.c.HMGet(ctx, k.rec, fields...).Result()
	if err != nil {
		return stored{}, err
	}
	return decodeStored(vals)
}

// claimFields are what Claim's read first fetches: the bytes, the version
// and the token, without the count fields, which Claim need not add
// (backend.Tallier). Three fields rather than eight is less for the
// server to find and send and for the client to parse on every replay
// that misses the Store's cache.
var claimFields = recordFields[:3]

// decodeStored decodes HMGET's answer for recordFields, or for
// claimFields, which leave the counts of the count fields out. A claim is
// written with token 0 in its bytes, since the script that writes it
// draws the token: field t holds it, and decodeStored puts it in the
// record and in the claim's attempt. The count fields are added to the
// record's counts.
func decodeStored(vals []any) (stored, error) {
	bs, _ := vals[0].(string)
	ver, _ := vals[1].(string)
	if vals[0] == nil || ver == "" {
		return stored{ver: "0"}, nil
	}
	// DecodeRecord copies what it keeps: the bytes need no copy of
	// their own.
	rec, err := backend.DecodeRecord(unsafe.Slice(unsafe.StringData(bs), len(bs)))
	if err != nil {
		return stored{ver: ver}, err
	}
	if rec.Token == 0 {
		ts, _ := vals[2].(string)
		tok, err := strconv.ParseUint(ts, 10, 64)
		if err != nil {
			return stored{ver: ver}, fmt.Errorf("%w: record without a token (field t %q)", backend.ErrCorrupt, ts)
		}
		setToken(rec, tok)
	}
	num := func(i int) int64 {
		v, _ := vals[i].(string)
		n, _ := strconv.ParseInt(v, 10, 64)
		return n
	}
	at := func(i int) time.Time {
		if n := num(i); n > 0 {
			return time.Unix(0, n)
		}
		return time.Time{}
	}
	if len(vals) < len(recordFields) {
		return stored{rec: rec, ver: ver}, nil // claimFields
	}
	counted := backend.Tally{Replays: num(3), Conflicts: num(4), Mismatches: num(5), LastReplay: at(6), LastRejection: at(7)}
	rec.AddTally(counted)
	return stored{rec: rec, ver: ver, counted: counted}, nil
}

// setToken gives a claim written with token 0 its token.
func setToken(rec *backend.Record, tok uint64) {
	rec.Token = tok
	for i := range rec.Attempts {
		if rec.Attempts[i].Token == 0 {
			rec.Attempts[i].Token = tok
		}
	}
}

// putResult is what putScript did.
type putResult int

const (
	putFenced   putResult = -1
	putConflict putResult = 0
	putWritten  putResult = 1
)

// put writes rec over the version ver, fenced by fence (0: not fenced),
// and returns what the script did and the record's new version. counted
// are the counts of rec kept in the count fields (stored.counted): its
// bytes leave them out.
// ttlFrom is when a done or released record's retention starts, for its
// TTL; zero keeps the key's TTL.
func (b *Backend) put(ctx context.Context, k keys, ver string, counted backend.Tally, fence uint64, rec *backend.Record, ttlFrom time.Time) (putResult, string, error) {
	ks, args := b.putArgs(k, ver, counted, fence, rec, ttlFrom)
	res, err := b.run(ctx, putScript, ks, args)
	if err != nil {
		return 0, "", err
	}
	return putAnswer(res)
}

// putAnswer reads putScript's answer.
func putAnswer(res any) (putResult, string, error) {
	out, ok := res.([]any)
	if !ok || len(out) == 0 {
		return 0, "", fmt.Errorf("unexpected answer %v", res)
	}
	n, _ := out[0].(int64)
	var nv string
	if len(out) > 1 {
		v, _ := out[1].(int64)
		nv = strconv.FormatInt(v, 10)
	}
	return putResult(n), nv, nil
}

// putArgs returns putScript's keys and arguments.
func (b *Backend) putArgs(k keys, ver string, counted backend.Tally, fence uint64, rec *backend.Record, ttlFrom time.Time) ([]string, []any) {
	stale, exp, ttl := "-", "-", "k"
	if rec.State == backend.StateInProgress {
		ttl = "0"
		if !rec.Attention {
			stale = staleScore(rec)
		}
	} else {
		exp = strconv.FormatInt(rec.ExpiresAt.UnixMilli(), 10)
		if !ttlFrom.IsZero() {
			ttl = strconv.FormatInt(max(rec.ExpiresAt.Sub(ttlFrom), 0).Milliseconds()+b.margin.Milliseconds(), 10)
		}
	}
	args := []any{ver, strconv.FormatUint(fence, 10), encodeBytes(rec, counted),
		strconv.FormatUint(rec.Token, 10), strconv.Itoa(int(rec.State)), stale, exp, k.member, ttl}
	return []string{k.rec, k.stale, k.exp, k.ver}, args
}

// encodeBytes encodes rec for its field b: its counts less counted, the
// counts its count fields keep.
func encodeBytes(rec *backend.Record, counted backend.Tally) []byte {
	w := *rec
	w.Format = backend.Format
	w.Replays -= counted.Replays
	w.Conflicts -= counted.Conflicts
	w.Mismatches -= counted.Mismatches
	return backend.EncodeRecord(&w)
}

// staleScore is an open claim's score in its shard's stale index: when it
// is due, the later of its lease end and its next check.
func staleScore(rec *backend.Record) string {
	at := rec.LeaseEnds
	if rec.NextCheck.After(at) {
		at = rec.NextCheck
	}
	return strconv.FormatInt(at.UnixMilli(), 10)
}

// run runs s, followed by WAIT on the same connection when the Backend
// waits for replicas.
func (b *Backend) run(ctx context.Context, s *redis.Script, ks []string, args []any) (any, error) {
	if b.replicas > 0 {
		return b.runWaited(ctx, s, ks, args)
	}
	return s.Run(ctx, b.c, ks, args...).Result()
}

// runWaited runs s and then WAIT on one connection, and fails unless
// b.replicas replicas acknowledged the write.
func (b *Backend) runWaited(ctx context.Context, s *redis.Script, ks []string, args []any) (any, error) {
	run := func(sha bool) (any, error) {
		var res *redis.Cmd
		var acked *redis.Cmd
		_, err := b.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			if sha {
				res = s.EvalSha(ctx, p, ks, args...)
			} else {
				res = s.Eval(ctx, p, ks, args...)
			}
			acked = p.Do(ctx, "WAIT", b.replicas, b.waitMS)
			return nil
		})
		if err := res.Err(); err != nil {
			return nil, err
		}
		if err != nil {
			return nil, err
		}
		if n, _ := acked.Int64(); n < int64(b.replicas) {
			return nil, fmt.Errorf("written on the primary, acknowledged by %d of %d replicas", n, b.replicas)
		}
		return res.Val(), nil
	}
	res, err := run(true)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		res, err = run(false)
	}
	return res, err
}

// Claim implements backend.Backend. It writes the claim with claimScript
// over the version it expects ("0", no record, at first), which draws the
// token on the server: a new key is claimed in one round trip. When the
// version is another, the script answers with the record as it is, and
// Claim decides on it: a replay, a claim in progress or a mismatch ends
// there; a released or expired record is claimed over its version.
func (b *Backend) Claim(ctx context.Context, scope, key string, args backend.ClaimArgs) (*backend.Record, bool, error) {
	if err := b.check(ctx); err != nil {
		return nil, false, err
	}
	k := b.keysOf(scope, key)
	var nonce string // the call's, made before its first write
	cur := stored{ver: "0"}
	if b.refused() != nil || b.found.Load() > 0 {
		// New claims are refused (a replay or a claim in progress is
		// still answered), or most recent calls found a record: read
		// first, with a plain HMGET, cheaper on the server than the
		// script.
		var err error
		if cur, err = b.read(ctx, k, claimFields); err != nil {
			return nil, false, backend.Unavailable("claim", err)
		}
		if r := cur.rec; r != nil && (r.State == backend.StateReleased || r.Expired(args.Now)) {
			// To be claimed over: its count fields decide what the
			// claim's bytes carry on, so read it whole.
			if cur, err = b.read(ctx, k, recordFields); err != nil {
				return nil, false, backend.Unavailable("claim", err)
			}
		}
	}
	for {
		if r := cur.rec; r != nil && r.State != backend.StateReleased && !r.Expired(args.Now) {
			b.noteFound(1)
			return r, false, nil
		}
		if err := b.refused(); err != nil {
			return nil, false, err
		}
		n := newClaim(scope, key, 0, args, cur.rec)
		// A released record's counts go on, in its count fields and its
		// bytes; an expired one's life ends, and its count fields go.
		keep, counted := "1", cur.counted
		if cur.rec == nil || cur.rec.State != backend.StateReleased {
			keep, counted = "0", backend.Tally{}
		}
		bs := encodeBytes(n, counted)
		if nonce == "" {
			nonce = b.nonce()
		}
		res, err := b.run(ctx, claimScript, []string{k.rec, k.stale, k.exp, k.ver, k.tok},
			[]any{cur.ver, bs, staleScore(n), k.member, nonce, keep, k.shard})
		if err != nil {
			return nil, false, backend.Unavailable("claim", err)
		}
		out, _ := res.([]any)
		if len(out) == 3 && out[0] == int64(1) {
			nv, _ := out[1].(int64)
			ts, _ := out[2].(string)
			tok, err := strconv.ParseUint(ts, 10, 64)
			if err != nil {
				return nil, false, backend.Unavailable("claim", fmt.Errorf("unexpected token %q", ts))
			}
			setToken(n, tok)
			// The bytes the script wrote, with token 0, which take puts in.
			b.claims.putBytes(scope, key, tok, bs, strconv.FormatInt(nv, 10))
			b.noteFound(-1)
			return n, true, nil
		}
		if len(out) != 10 {
			return nil, false, backend.Unavailable("claim", fmt.Errorf("unexpected answer %v", res))
		}
		vals := []any{out[2], out[1], out[3], out[5], out[6], out[7], out[8], out[9]}
		if c, _ := out[4].(string); c == nonce {
			// This call's own claim, whose answer was lost: the client
			// sent the script again and found it written.
			s, err := decodeStored(vals)
			if err != nil || s.rec == nil || s.rec.State != backend.StateInProgress {
				return nil, false, backend.Unavailable("claim", fmt.Errorf("own claim unreadable: %v", err))
			}
			return s.rec, true, nil
		}
		cur, err = decodeStored(vals)
		if err != nil {
			return nil, false, backend.Unavailable("claim", err)
		}
		if err := b.check(ctx); err != nil {
			return nil, false, err
		}
	}
}

// noteFound moves the Backend's estimate of whether Claim finds a record
// (replays, claims in progress, mismatches) more often than not, by d,
// within ±foundBound: while it is above zero, Claim reads before it
// writes.
func (b *Backend) noteFound(d int32) {
	for {
		f := b.found.Load()
		n := min(max(f+d, -foundBound), foundBound)
		if n == f || b.found.CompareAndSwap(f, n) {
			return
		}
	}
}

// foundBound bounds Backend.found: after a run of replays, this many
// claims of new keys switch Claim back to writing first.
const foundBound = 16

// nonce returns a value no other Claim call of any Backend uses.
func (b *Backend) nonce() string {
	return b.nonces + strconv.FormatUint(b.calls.Add(1), 36)
}

// newClaim builds a claim with token over rec (nil, released or expired).
func newClaim(scope, key string, token uint64, args backend.ClaimArgs, rec *backend.Record) *backend.Record {
	n := &backend.Record{
		Scope: scope, Key: key, State: backend.StateInProgress,
		Fingerprint: args.Fingerprint, Token: token,
		LeaseEnds: args.LeaseEnds, Retention: args.Retention,
		FirstSeen: args.Now, ClaimedAt: args.Now, Claims: 1, Owner: args.Owner,
	}
	// An expired record starts a new life; a released one goes on.
	if rec != nil && rec.State == backend.StateReleased {
		n.FirstSeen = rec.FirstSeen
		n.Claims = rec.Claims + 1
		n.Attempts, n.MayHaveRunTwice = rec.Attempts, rec.MayHaveRunTwice
		n.Replays, n.LastReplay = rec.Replays, rec.LastReplay
		n.Conflicts, n.Mismatches, n.LastRejection = rec.Conflicts, rec.Mismatches, rec.LastRejection
	}
	n.AddAttempt(backend.Attempt{Token: token, ClaimedAt: args.Now, Owner: args.Owner})
	return n
}

// fenced runs fn on the record of (scope, key) if it is in progress with
// token, and writes the record fn leaves, fenced by token; ttlFrom is
// put's.
func (b *Backend) fenced(ctx context.Context, op, scope, key string, token uint64, ttlFrom time.Time, fn func(rec *backend.Record)) error {
	return b.fencedIn(ctx, op, scope, key, token, backend.StateInProgress, func(rec *backend.Record) time.Time {
		fn(rec)
		return ttlFrom
	})
}

// fencedIn is fenced for a record in state: fn changes the record and
// returns put's ttlFrom.
func (b *Backend) fencedIn(ctx context.Context, op, scope, key string, token uint64, state backend.State,
	fn func(rec *backend.Record) time.Time) error {
	if err := b.check(ctx); err != nil {
		return err
	}
	k := b.keysOf(scope, key)
	if state == backend.StateInProgress {
		if done, err := b.fencedCached(ctx, op, k, scope, key, token, fn); done {
			return err
		}
	}
	for {
		s, err := b.read(ctx, k, recordFields)
		if err != nil {
			return backend.Unavailable(op, err)
		}
		rec := s.rec
		if rec == nil || rec.State != state || rec.Token != token {
			return &backend.FencedError{Scope: scope, Key: key, Token: token}
		}
		ttlFrom := fn(rec)
		// The script's fence checks an in-progress token; for another
		// state the version, read with the record just checked, fences
		// the write alone.
		fence := token
		if state != backend.StateInProgress {
			fence = 0
		}
		res, nv, err := b.put(ctx, k, s.ver, s.counted, fence, rec, ttlFrom)
		switch {
		case err != nil:
			return backend.Unavailable(op, err)
		case res == putWritten:
			if state == backend.StateInProgress {
				b.claims.put(rec, s.counted, nv)
			}
			return nil
		case res == putFenced:
			return &backend.FencedError{Scope: scope, Key: key, Token: token}
		}
		if err := b.check(ctx); err != nil {
			return err
		}
	}
}

// Reseal implements backend.Resealer: the result of a done record with
// token is replaced; its key keeps its TTL.
func (b *Backend) Reseal(ctx context.Context, scope, key string, token uint64, res backend.Result) error {
	return b.fencedIn(ctx, "reseal", scope, key, token, backend.StateDone, func(rec *backend.Record) time.Time {
		rec.Result = res.Clone()
		return time.Time{}
	})
}

var _ backend.Resealer = (*Backend)(nil)

// Complete implements backend.Backend.
func (b *Backend) Complete(ctx context.Context, scope, key string, token uint64, c backend.Completion) error {
	return b.fenced(ctx, "complete", scope, key, token, c.At, func(rec *backend.Record) {
		rec.State, rec.Result = backend.StateDone, c.Result.Clone()
		rec.DoneAt, rec.ExpiresAt, rec.Recovered = c.At, c.ExpiresAt, c.Recovered
		rec.EndAttempt(token, c.Ending)
		rec.Checks, rec.NextCheck, rec.Attention, rec.Owner = 0, time.Time{}, false, ""
	})
}

// Release implements backend.Backend.
func (b *Backend) Release(ctx context.Context, scope, key string, token uint64, r backend.Releasing) error {
	return b.fenced(ctx, "release", scope, key, token, r.At, func(rec *backend.Record) {
		rec.State, rec.ExpiresAt, rec.Recovered = backend.StateReleased, r.ExpiresAt, r.Reason
		rec.EndAttempt(token, r.Ending)
		rec.Checks, rec.NextCheck, rec.Attention, rec.Owner = 0, time.Time{}, false, ""
		rec.DoneAt = r.At
	})
}

// Extend implements backend.Backend.
func (b *Backend) Extend(ctx context.Context, scope, key string, token uint64, leaseEnds time.Time) error {
	return b.fenced(ctx, "extend", scope, key, token, time.Time{}, func(rec *backend.Record) {
		rec.LeaseEnds = leaseEnds
	})
}

// Hold implements backend.Holder.
func (b *Backend) Hold(ctx context.Context, scope, key string, token uint64, leaseEnds time.Time, note string) error {
	return b.fenced(ctx, "hold", scope, key, token, time.Time{}, func(rec *backend.Record) {
		rec.LeaseEnds = leaseEnds
		rec.NoteAttempt(token, note)
	})
}

// Defer implements backend.Backend.
func (b *Backend) Defer(ctx context.Context, scope, key string, token uint64, d backend.Deferral) error {
	return b.fenced(ctx, "defer", scope, key, token, time.Time{}, func(rec *backend.Record) {
		rec.Checks, rec.NextCheck, rec.Attention = d.Checks, d.NextCheck, d.Attention
	})
}

// Get implements backend.Backend.
func (b *Backend) Get(ctx context.Context, scope, key string) (*backend.Record, error) {
	if err := b.check(ctx); err != nil {
		return nil, err
	}
	s, err := b.read(ctx, b.keysOf(scope, key), recordFields)
	if err != nil {
		return nil, backend.Unavailable("get", err)
	}
	if s.rec == nil {
		return nil, backend.ErrNotFound
	}
	return s.rec, nil
}

// readMany reads the records of ks in one round trip. A record that fails
// to decode is returned with its error.
func (b *Backend) readMany(ctx context.Context, ks []keys) ([]stored, []error, error) {
	cmds := make([]*redis.SliceCmd, len(ks))
	_, err := b.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range ks {
			cmds[i] = p.HMGet(ctx, k.rec, recordFields...)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	out := make([]stored, len(ks))
	errs := make([]error, len(ks))
	for i, c := range cmds {
		out[i], errs[i] = decodeStored(c.Val())
	}
	return out, errs, nil
}

// AddTallies implements backend.Tallier. The counts go beside the
// record, in its count fields, which a read adds to the record's own: a
// batch is one pipelined round trip of tallyScript, one call a shard,
// with no read and no record encoded. Counts taken on a done
// record are dropped if the key was claimed again since (its token
// moved); counts of a record that is gone are dropped.
func (b *Backend) AddTallies(ctx context.Context, tallies []backend.Tally) error {
	if err := b.check(ctx); err != nil {
		return err
	}
	byKey := map[[2]string]*backend.Tally{}
	for _, t := range tallies {
		id := [2]string{t.Scope, t.Key}
		if s, ok := byKey[id]; ok {
			s.Add(t)
		} else {
			c := t
			byKey[id] = &c
		}
	}
	// One script call per shard, of at most tallyChunk records.
	var ks [][]string
	var args [][]any
	open := map[int]int{} // shard → its call's index in ks and args
	nanos := func(t time.Time) string {
		if t.IsZero() {
			return "0"
		}
		return strconv.FormatInt(t.UnixNano(), 10)
	}
	for _, t := range byKey {
		k := b.keysOf(t.Scope, t.Key)
		i, ok := open[k.shard]
		if !ok || len(ks[i]) == tallyChunk {
			i = len(ks)
			open[k.shard] = i
			ks, args = append(ks, nil), append(args, nil)
		}
		ks[i] = append(ks[i], k.rec)
		args[i] = append(args[i], strconv.FormatUint(t.Token, 10), t.Replays, t.Conflicts, t.Mismatches,
			nanos(t.LastReplay), nanos(t.LastRejection))
	}
	if _, err := b.runMany(ctx, tallyScript, ks, args); err != nil {
		return backend.Unavailable("add tallies", err)
	}
	return nil
}

// tallyChunk bounds the records one tallyScript call counts, so that no
// call holds the server for long.
const tallyChunk = 256

// runMany runs s once for each of ks and args in one pipelined round trip
// (followed by WAIT when the Backend waits for replicas), and returns the
// answers in order.
func (b *Backend) runMany(ctx context.Context, s *redis.Script, ks [][]string, args [][]any) ([]any, error) {
	if len(ks) == 0 {
		return nil, nil
	}
	run := func(sha bool) ([]any, error) {
		cmds := make([]*redis.Cmd, len(ks))
		var acked *redis.Cmd
		_, err := b.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := range ks {
				if sha {
					cmds[i] = s.EvalSha(ctx, p, ks[i], args[i]...)
				} else {
					cmds[i] = s.Eval(ctx, p, ks[i], args[i]...)
				}
			}
			if b.replicas > 0 {
				acked = p.Do(ctx, "WAIT", b.replicas, b.waitMS)
			}
			return nil
		})
		for _, c := range cmds {
			if err := c.Err(); err != nil {
				return nil, err
			}
		}
		if err != nil {
			return nil, err
		}
		if acked != nil {
			if n, _ := acked.Int64(); n < int64(b.replicas) {
				return nil, fmt.Errorf("written on the primary, acknowledged by %d of %d replicas", n, b.replicas)
			}
		}
		out := make([]any, len(cmds))
		for i, c := range cmds {
			out[i] = c.Val()
		}
		return out, nil
	}
	res, err := run(true)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		res, err = run(false)
	}
	return res, err
}

// Scan implements backend.Lister: it walks the store's record keys with
// SCAN (on every primary of a Cluster), in no particular order. A record
// that fails to decode is skipped.
func (b *Backend) Scan(ctx context.Context, fn func(*backend.Record) bool) error {
	if err := b.check(ctx); err != nil {
		return err
	}
	stop := errors.New("stop")
	scan := func(ctx context.Context, c redis.UniversalClient) error {
		it := c.Scan(ctx, 0, "{"+b.prefix+":*}:r:*", 256).Iterator()
		for it.Next(ctx) {
			vals, err := c.HMGet(ctx, it.Val(), recordFields...).Result()
			if err != nil {
				return err
			}
			s, err := decodeStored(vals)
			if err != nil || s.rec == nil {
				continue
			}
			if !fn(s.rec) {
				return stop
			}
		}
		return it.Err()
	}
	nodes := []redis.UniversalClient{b.c}
	if cc, ok := b.c.(*redis.ClusterClient); ok {
		// ForEachMaster calls its function concurrently: gather the
		// primaries, then walk them one at a time, as fn expects.
		var mu sync.Mutex // guards nodes
		nodes = nil
		err := cc.ForEachMaster(ctx, func(_ context.Context, n *redis.Client) error {
			mu.Lock()
			nodes = append(nodes, n)
			mu.Unlock()
			return nil
		})
		if err != nil {
			return backend.Unavailable("scan", err)
		}
	}
	for _, n := range nodes {
		if err := scan(ctx, n); errors.Is(err, stop) {
			return nil
		} else if err != nil {
			return backend.Unavailable("scan", err)
		}
	}
	return nil
}
