package badgerstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/internal/badger"
	"github.com/idemkit/idem/internal/badger/y"
	"github.com/idemkit/idem/internal/engine"
)

// readRecord is the one read of a record, for ops (t) and for readers
// outside the committer (t nil), and returns it with its Badger expiry.
// The layers, first match wins (engine.Read): the writes of t's own unit;
// the writes pending between the log and Badger (for a reader, only
// durable ones); the open claims (resident); Badger. docs/engine.md
// argues why this order keeps the contract. (Replays of done records are
// answered above the backend, by the Store's replay cache.)
func (b *Backend) readRecord(t *engine.Txn, id []byte) (*backend.Record, uint64, error) {
	return b.readRecordAt(t, id, withPrefix(prefixRecord, id), engine.Stamp{}, nil)
}

// readRecordAt is readRecord with id's record key, rk, made by the
// caller, for an op after a peek of id that returned s (the zero Stamp:
// none; engine.Txn.ReadAfter): a key the peek found absent is not looked
// up in Badger again. The record is decoded into sp if not nil.
func (b *Backend) readRecordAt(t *engine.Txn, id, rk []byte, s engine.Stamp, sp *backend.RecordSpace) (*backend.Record, uint64, error) {
	var rec *backend.Record
	var exp uint64
	decode := func(v []byte, expiresAt uint64) error {
		var err error
		if sp != nil {
			rec, err = sp.Decode(v)
		} else {
			rec, err = backend.DecodeRecord(v)
		}
		exp = expiresAt
		return err
	}
	var err error
	if t != nil {
		_, err = t.ReadAfter(rk, s, decode)
	} else {
		_, err = b.eng.Read(nil, rk, decode)
	}
	return rec, exp, damaged(err, id)
}

// damaged names the record of id in err if err is damage: a record that
// fails its checksum, or a Badger block or value that fails its own.
// Such a record is never replayed and its effect never run again: the
// caller gets ErrCorrupt until an operator settles the key.
func damaged(err error, id []byte) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, y.ErrChecksumMismatch) && !errors.Is(err, backend.ErrCorrupt) {
		err = fmt.Errorf("%w: %w", backend.ErrCorrupt, err)
	}
	if !errors.Is(err, backend.ErrCorrupt) {
		return err
	}
	scope, key := splitRecordID(id)
	return fmt.Errorf("%w (the record of scope %q, key %q)", err, scope, key)
}

// resident is the engine's Options.Resident: an open claim's record, as
// last made durable.
func (b *Backend) resident(key []byte) []byte {
	if len(key) == 0 || key[0] != prefixRecord {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.open[string(key[1:])].val
}

// put writes rec; ttlFrom, if not zero, is the store's time used to set
// Badger's TTL relative to the record's expiry. Once the write is durable
// it mirrors rec in the open claims: as an open claim if in progress, else
// by forgetting it. Nothing may change rec afterwards.
func (b *Backend) put(t *engine.Txn, id []byte, rec *backend.Record, ttlFrom time.Time) error {
	return b.putAt(t, id, withPrefix(prefixRecord, id), rec, ttlFrom)
}

// putAt is put with id's record key, rk, made by the caller.
func (b *Backend) putAt(t *engine.Txn, id, rk []byte, rec *backend.Record, ttlFrom time.Time) error {
	c, open := b.setRecord(t, rk, rec, ttlFrom)
	t.OnCommit(func() { b.mirror(id, c, open) })
	return nil
}

// setRecord buffers the write of rec under rk, and returns what mirror
// must do once it is durable: keep c as an open claim (open), or forget
// the claim.
func (b *Backend) setRecord(t *engine.Txn, rk []byte, rec *backend.Record, ttlFrom time.Time) (c openClaim, open bool) {
	v := backend.EncodeRecord(rec)
	var exp uint64
	if !ttlFrom.IsZero() && !rec.ExpiresAt.IsZero() {
		exp = badgerTTL(max(rec.ExpiresAt.Sub(ttlFrom), 0) + reclaimGrace)
	}
	t.Set(rk, v, exp)
	if rec.State != backend.StateInProgress {
		return openClaim{}, false
	}
	return openClaim{leaseEnds: rec.LeaseEnds, nextCheck: rec.NextCheck, attention: rec.Attention, val: v}, true
}

// mirror makes the open claims say what a durable write of id's record
// left: c as an open claim, or none.
func (b *Backend) mirror(id []byte, c openClaim, open bool) {
	b.mu.Lock()
	if open {
		b.open[string(id)] = c
	} else {
		delete(b.open, string(id))
	}
	b.mu.Unlock()
}

// reopen replaces the stored record of id, if it is an open claim, by v,
// which changed only its counts.
func (b *Backend) reopen(id []byte, v []byte) {
	b.mu.Lock()
	if c, ok := b.open[string(id)]; ok {
		c.val = v
		b.open[string(id)] = c
	}
	b.mu.Unlock()
}

// Claim implements Backend.
func (b *Backend) Claim(ctx context.Context, scope, key string, args backend.ClaimArgs) (*backend.Record, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	rk := recordKey(scope, key) // the peek's, the op's and the write's
	id := rk[1:]
	// Fast path, off the committer: a done record that has not expired, or
	// a claim in progress, is answered from a read. Neither can become
	// claimable by any write but the committer's own later ones, so the
	// answer is the one the committer would give at this instant.
	rec, stamp, err := b.peek(rk, id)
	if err != nil {
		return nil, false, backend.Unavailable("claim", err)
	} else if rec != nil && (rec.State == backend.StateInProgress || (rec.State == backend.StateDone && !rec.Expired(args.Now))) {
		return rec, false, nil
	}
	// New claims stop while free space is below the reserve; the answers
	// above, and completions of claims already made, go on.
	if err := b.eng.LowSpace(); err != nil {
		return nil, false, fmt.Errorf("%w: claim refused: %w", backend.ErrUnavailable, err)
	}
	o := b.newCycleOp(scope, key, rk)
	o.args, o.stamp = args, stamp
	err = b.update(o.claimFn) // cycleOp.claim
	out, claimed := o.out, o.claimed
	o.done(err)
	if err != nil {
		return nil, false, backend.Unavailable("claim", err)
	}
	// out was decoded or built by this op and is referenced by nothing
	// else once the op is answered: the caller may have it.
	return out, claimed, nil
}

// claimRecord buffers a claim of id over rec (nil, released or expired),
// all but the record's own write, and returns the claim's record.
func (b *Backend) claimRecord(t *engine.Txn, scope, key string, id []byte, args backend.ClaimArgs, rec *backend.Record) *backend.Record {
	token := b.nextToken(t)
	n := &backend.Record{
		Scope: scope, Key: key, State: backend.StateInProgress,
		Fingerprint: args.Fingerprint, Token: token,
		LeaseEnds: args.LeaseEnds, Retention: args.Retention,
		FirstSeen: args.Now, ClaimedAt: args.Now, Claims: 1, Owner: args.Owner,
	}
	if rec != nil {
		// An expired record starts a new life: the counts beside it are
		// of tokens below the new claim's, never read again, and expire
		// on their own. A released one goes on, its counts in it.
		if rec.State == backend.StateReleased {
			n.FirstSeen = rec.FirstSeen
			n.Claims = rec.Claims + 1
			n.Attempts, n.MayHaveRunTwice = rec.Attempts, rec.MayHaveRunTwice
			n.Replays, n.LastReplay = rec.Replays, rec.LastReplay
			n.Conflicts, n.Mismatches, n.LastRejection = rec.Conflicts, rec.Mismatches, rec.LastRejection
		}
		if !rec.ExpiresAt.IsZero() {
			t.Delete(expiryKey(rec.ExpiresAt, id))
		}
	}
	n.AddAttempt(backend.Attempt{Token: token, ClaimedAt: args.Now, Owner: args.Owner,
		Reason: b.lossNoteFor(rec, args.Now)}) // loss.go
	t.Set(withPrefix(prefixClaim, id), nil, 0)
	return n
}

// fenced runs fn on the record of (scope, key) if it is in progress with
// token, and writes the record fn leaves.
func (b *Backend) fenced(ctx context.Context, op, scope, key string, token uint64, ttlFrom time.Time,
	fn func(t *engine.Txn, id []byte, rec *backend.Record)) error {
	return b.fencedIn(ctx, op, scope, key, token, backend.StateInProgress,
		func(t *engine.Txn, id []byte, rec *backend.Record) time.Time {
			fn(t, id, rec)
			return ttlFrom
		})
}

// fencedIn runs fn on the record of (scope, key) if it is in state with
// token, and writes the record fn leaves, with fn's result as put's
// ttlFrom.
func (b *Backend) fencedIn(ctx context.Context, op, scope, key string, token uint64, state backend.State,
	fn func(t *engine.Txn, id []byte, rec *backend.Record) time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	rk := recordKey(scope, key)
	id := rk[1:]
	err := b.update(func(t *engine.Txn) error {
		rec, _, err := b.readRecordAt(t, id, rk, engine.Stamp{}, nil)
		if err != nil {
			return err
		}
		if err := fence(rec, state, scope, key, token); err != nil {
			return err
		}
		return b.putAt(t, id, rk, rec, fn(t, id, rec))
	})
	return backend.Unavailable(op, err)
}

// fence returns a *backend.FencedError for (scope, key, token) unless
// rec, the key's record, is in state with token.
func fence(rec *backend.Record, state backend.State, scope, key string, token uint64) error {
	if rec == nil || rec.State != state || rec.Token != token {
		return &backend.FencedError{Scope: scope, Key: key, Token: token}
	}
	return nil
}

// ended files the expiry index entry of a record that ended at `at` and
// expires at exp, and closes its claim.
func ended(t *engine.Txn, id []byte, at, exp time.Time) {
	t.Delete(withPrefix(prefixClaim, id))
	t.Set(expiryKey(exp, id), nil, badgerTTL(max(exp.Sub(at), 0)+reclaimGrace))
}

// Complete implements Backend.
func (b *Backend) Complete(ctx context.Context, scope, key string, token uint64, c backend.Completion) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	o := b.newCycleOp(scope, key, recordKey(scope, key))
	o.token, o.comp = token, c
	err := b.update(o.completeFn) // cycleOp.complete
	o.done(err)
	return backend.Unavailable("complete", err)
}

// completeRecord makes rec, in progress with token, done with c's result
// (not copied), and buffers the index writes that go with it.
func completeRecord(t *engine.Txn, id []byte, rec *backend.Record, token uint64, c *backend.Completion) {
	rec.State, rec.Result = backend.StateDone, &c.Result
	rec.DoneAt, rec.ExpiresAt, rec.Recovered = c.At, c.ExpiresAt, c.Recovered
	rec.EndAttempt(token, c.Ending)
	rec.Checks, rec.NextCheck, rec.Attention, rec.Owner = 0, time.Time{}, false, ""
	ended(t, id, c.At, c.ExpiresAt)
}

// Release implements Backend.
func (b *Backend) Release(ctx context.Context, scope, key string, token uint64, r backend.Releasing) error {
	return b.fenced(ctx, "release", scope, key, token, r.At, func(t *engine.Txn, id []byte, rec *backend.Record) {
		rec.State, rec.ExpiresAt, rec.Recovered = backend.StateReleased, r.ExpiresAt, r.Reason
		rec.EndAttempt(token, r.Ending)
		rec.Checks, rec.NextCheck, rec.Attention, rec.Owner = 0, time.Time{}, false, ""
		rec.DoneAt = r.At
		ended(t, id, r.At, r.ExpiresAt)
	})
}

// Extend implements Backend.
func (b *Backend) Extend(ctx context.Context, scope, key string, token uint64, leaseEnds time.Time) error {
	return b.fenced(ctx, "extend", scope, key, token, time.Time{}, func(_ *engine.Txn, _ []byte, rec *backend.Record) {
		rec.LeaseEnds = leaseEnds
	})
}

// Hold implements backend.Holder.
func (b *Backend) Hold(ctx context.Context, scope, key string, token uint64, leaseEnds time.Time, note string) error {
	return b.fenced(ctx, "hold", scope, key, token, time.Time{}, func(_ *engine.Txn, _ []byte, rec *backend.Record) {
		rec.LeaseEnds = leaseEnds
		rec.NoteAttempt(token, note)
	})
}

var _ backend.Holder = (*Backend)(nil)

// Reseal implements backend.Resealer.
func (b *Backend) Reseal(ctx context.Context, scope, key string, token uint64, res backend.Result) error {
	return b.fencedIn(ctx, "reseal", scope, key, token, backend.StateDone,
		func(_ *engine.Txn, _ []byte, rec *backend.Record) time.Time {
			rec.Result = res.Clone()
			return rec.DoneAt // Badger's TTL counts from DoneAt, as Complete set it
		})
}

var _ backend.Resealer = (*Backend)(nil)

// Defer implements Backend.
func (b *Backend) Defer(ctx context.Context, scope, key string, token uint64, d backend.Deferral) error {
	return b.fenced(ctx, "defer", scope, key, token, time.Time{}, func(_ *engine.Txn, _ []byte, rec *backend.Record) {
		rec.Checks, rec.NextCheck, rec.Attention = d.Checks, d.NextCheck, d.Attention
	})
}

// peek reads the record of (scope, key), stored under id, outside the
// committer, through readRecord. The record is decoded for the caller
// (the decoder copies what it keeps out of the stored bytes), which may
// have it.
func (b *Backend) peek(rk, id []byte) (*backend.Record, engine.Stamp, error) {
	var rec *backend.Record
	_, s, err := b.eng.ReadStamped(rk, func(v []byte, _ uint64) error {
		var err error
		rec, err = backend.DecodeRecord(v)
		return err
	})
	return rec, s, damaged(err, id)
}

// Get implements Backend.
func (b *Backend) Get(ctx context.Context, scope, key string) (*backend.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	id := recordID(scope, key)
	rec, _, err := b.readRecord(nil, id)
	if err == nil && rec != nil {
		err = b.addCounts(id, rec)
	}
	if err != nil {
		return nil, backend.Unavailable("get", err)
	}
	if rec == nil {
		return nil, backend.ErrNotFound
	}
	return rec, nil
}

// Stale implements Backend. It picks the due claims from the in-memory
// open claims, and reads each through readRecord, which finds it there
// too: its cost does not grow with the number of done records.
func (b *Backend) Stale(ctx context.Context, now time.Time, limit int) ([]*backend.Record, error) {
	type due struct {
		leaseEnds time.Time
		id        string
	}
	var ids []due
	b.mu.Lock()
	for id, c := range b.open {
		if !c.attention && !now.Before(c.leaseEnds) && !now.Before(c.nextCheck) {
			ids = append(ids, due{c.leaseEnds, id})
		}
	}
	b.mu.Unlock()
	sort.Slice(ids, func(i, j int) bool { return ids[i].leaseEnds.Before(ids[j].leaseEnds) })
	var out []*backend.Record
	for _, d := range ids {
		if len(out) >= limit {
			break
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		rec, _, err := b.readRecord(nil, []byte(d.id))
		if err != nil {
			return nil, backend.Unavailable("stale", err)
		}
		if rec != nil && rec.State == backend.StateInProgress && rec.Stale(now) && !now.Before(rec.NextCheck) && !rec.Attention {
			out = append(out, rec)
		}
	}
	return out, nil
}

// Reclaim implements Backend. It walks the expiry index from where the last
// call stopped, so the tombstones of what it already deleted are sought
// past rather than read again.
func (b *Backend) Reclaim(ctx context.Context, now time.Time, limit int) ([]backend.Ref, error) {
	if b.ro {
		return nil, fromEngine(engine.ErrReadOnly)
	}
	var refs []backend.Ref
	for len(refs) < limit {
		if err := ctx.Err(); err != nil {
			return refs, err
		}
		due, err := b.dueExpiries(now, limit-len(refs))
		if err != nil {
			return refs, backend.Unavailable("reclaim", err)
		}
		if len(due) == 0 {
			break
		}
		var got []backend.Ref
		err = b.update(func(t *engine.Txn) error {
			got = got[:0]
			return b.reclaim(t, now, due, &got)
		})
		if err != nil {
			return refs, backend.Unavailable("reclaim", err)
		}
		refs = append(refs, got...)
		if len(due) < limit-len(refs)+len(got) {
			break // the index holds nothing more that is due
		}
	}
	return refs, nil
}

// reclaim deletes the records of due that are still expired, and every
// entry of due, in the op t.
func (b *Backend) reclaim(t *engine.Txn, now time.Time, due []expiryEntry, got *[]backend.Ref) error {
	for _, e := range due {
		rec, _, err := b.readRecord(t, e.id)
		// A corrupt record is left for an operator to inspect; its index
		// entry goes, so that it cannot stall reclamation.
		if err != nil && !errors.Is(err, backend.ErrCorrupt) {
			return err
		}
		t.Delete(e.key)
		// The index entry may outlive its record's life: the key may have
		// been claimed again since. Delete only what is still expired.
		if rec != nil && rec.State != backend.StateInProgress && rec.ExpiresAt.UnixNano() == e.at && !now.Before(rec.ExpiresAt) {
			*got = append(*got, backend.Ref{Scope: rec.Scope, Key: rec.Key, Token: rec.Token})
			t.Delete(withPrefix(prefixRecord, e.id))
			for _, k := range e.counts {
				t.Delete(k)
			}
		}
	}
	last := due[len(due)-1].key
	t.OnCommit(func() {
		b.mu.Lock()
		if bytes.Compare(last, b.cursor) > 0 {
			b.cursor = last
		}
		b.mu.Unlock()
	})
	return nil
}

type expiryEntry struct {
	at  int64
	id  []byte
	key []byte
	// counts are the keys of the counts entries beside the record that
	// Badger held when the entry was read: the reclaim deletes them with
	// the record (one written since expires on its own).
	counts [][]byte
}

// dueExpiries reads up to limit expiry index entries due at now, from the
// cursor on.
func (b *Backend) dueExpiries(now time.Time, limit int) ([]expiryEntry, error) {
	b.mu.Lock()
	// Seek just past the last key processed: a zero byte appended is the
	// next possible key.
	start := append(bytes.Clone(b.cursor), 0)
	b.mu.Unlock()
	if len(start) == 1 {
		start = []byte{prefixExpiry}
	}
	var due []expiryEntry
	err := b.eng.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixExpiry}})
		defer it.Close()
		for it.Seek(start); it.Valid() && len(due) < limit; it.Next() {
			k := it.Item().Key()
			at := int64(binary.BigEndian.Uint64(k[1:9]))
			if at > now.UnixNano() {
				break
			}
			due = append(due, expiryEntry{at: at, id: bytes.Clone(k[9:]), key: bytes.Clone(k)})
		}
		counts := newCountsReader(txn)
		defer counts.close()
		for i := range due {
			due[i].counts = counts.keys(due[i].id)
		}
		return nil
	})
	return due, err
}
