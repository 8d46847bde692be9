package idem

import (
	"encoding/binary"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// The Badger backend's hot set: decoded done records, so that a replay of
// a recent key is a map lookup rather than a read through the LSM tree and
// a msgpack decode. The Store answers replays from it directly (Begin's
// replayHot), without a backend call.
//
// Why a cached record can be trusted: a done record does not change until
// it expires (its counts live beside it, see AddTallies). Whatever deletes
// or replaces a record (Reclaim, a claim of an expired record) drops it
// from the set after its commit, and a reader re-checks expiry with the
// store's clock on every use.
//
// The set is split into shards by a hash of the record id, each with its
// own lock, so that replays of different keys on different cores do not
// queue on one lock. A replay takes its shard's lock once, for the lookup
// and for counting the replay in the entry: the counts are plain fields
// under that lock, so counting adds no atomic operation to a replay (a
// read lock would cost the same two as the mutex, and atomic counts two
// more). The bound on its size is the whole set's, so a poor
// spread of ids over the shards costs only some contention: the shard hash
// is a cheap mix of the id's first and last bytes rather than a hash of all
// of them (the map hashes the id again anyway).

// hotBytes bounds the set's approximate size; past it, the records put
// longest ago in the shard receiving a record are evicted first. Records
// with bodies over hotMaxBody are never kept: a large body is rare enough
// to be read from the store.
const (
	hotBytes   = 16 << 20
	hotMaxBody = 16 << 10

	hotShardBits = 5
	hotShards    = 1 << hotShardBits
)

// hotEntry is one kept record and the replays counted on it that the
// Store has not yet handed to the backend. What a replay reads and writes
// comes first, within one cache line; the fingerprint's bytes follow the
// id's, which the map lookup has just read. Everything but the counts is
// set before the entry is put and never changed.
type hotEntry struct {
	fingerprint string
	expiresAt   time.Time

	// replays counts replays answered from this entry since the last
	// flush; lastReplay is the latest one's store time in Unix
	// nanoseconds. Both are guarded by the lock of the entry's shard (an
	// id's shard never changes). An entry is queued on its shard's pending
	// list exactly when replays goes from zero to one, so that a flush
	// visits only the entries it must, and a count is never lost: an entry
	// dropped from the map stays on the list until flushed.
	replays    int64
	lastReplay int64

	token uint64
	// result is a copy of rec's: replays hand out its address.
	result Result
	// rec is done and never changed.
	rec  *Record
	size int // what size counted for it
}

type hotShard struct {
	mu    sync.Mutex // guards the fields below and its entries' counts
	m     map[string]*hotEntry
	order []string // ids in the order they were put, oldest at head
	head  int      // index in order of the oldest id still queued
	bytes int
	// pending holds the entries whose replays are not yet flushed.
	pending []*hotEntry
	// Padding keeps two shards' locks out of one cache line.
	_ [64]byte
}

// hotSet is the set of kept records. The zero value is empty and ready.
type hotSet struct {
	bytes  atomic.Int64 // the sum of the shards' bytes
	shards [hotShards]hotShard
}

func (h *hotSet) shard(id []byte) *hotShard {
	var first, last uint64
	if n := len(id); n >= 8 {
		first, last = binary.LittleEndian.Uint64(id), binary.LittleEndian.Uint64(id[n-8:])
	} else {
		for _, c := range id {
			first = first<<8 | uint64(c)
		}
	}
	x := (first ^ bits.RotateLeft64(last, 29) ^ uint64(len(id))) * 0x9e3779b97f4a7c15
	return &h.shards[x>>(64-hotShardBits)]
}

// size approximates what a kept record costs in memory.
func size(id string, rec *Record) int {
	n := 2*len(id) + len(rec.Scope) + len(rec.Key) + len(rec.Fingerprint) + 256 + len(rec.Attempts)*72
	if rec.Result != nil {
		n += len(rec.Result.Body) + len(rec.Result.Error)
		for k, vs := range rec.Result.Header {
			n += len(k)
			for _, v := range vs {
				n += len(v) + 16
			}
		}
	}
	return n
}

// get returns the entry kept for id, or nil. It allocates nothing.
func (h *hotSet) get(id []byte) *hotEntry {
	sh := h.shard(id)
	sh.mu.Lock()
	e := sh.m[string(id)]
	sh.mu.Unlock()
	return e
}

// replay returns the entry kept for id if its fingerprint is fp and it has
// not expired at now, and then, if count, counts a replay at now on it.
// full reports that the shard's pending list has grown to its share of
// maxTallies, so that the caller can ask for an early flush. It allocates
// nothing (but for the pending list's growth).
func (h *hotSet) replay(id []byte, fp string, now time.Time, count bool) (e *hotEntry, full bool) {
	sh := h.shard(id)
	sh.mu.Lock()
	e = sh.m[string(id)]
	if e == nil || e.fingerprint != fp || !now.Before(e.expiresAt) {
		sh.mu.Unlock()
		return nil, false
	}
	if count {
		if e.replays == 0 {
			sh.pending = append(sh.pending, e)
			full = len(sh.pending) >= maxTallies/hotShards
		}
		e.replays++
		if at := now.UnixNano(); at > e.lastReplay {
			e.lastReplay = at
		}
	}
	sh.mu.Unlock()
	return e, full
}

// put keeps rec, which must be done (with a result) and must not be
// changed afterwards.
func (h *hotSet) put(id []byte, rec *Record) {
	if rec.Result == nil || len(rec.Result.Body) > hotMaxBody {
		return
	}
	// One allocation for the id (the map's key) and the fingerprint.
	idfp := string(append(id[:len(id):len(id)], rec.Fingerprint...))
	k := idfp[:len(id)]
	e := &hotEntry{fingerprint: idfp[len(id):], expiresAt: rec.ExpiresAt, token: rec.Token,
		result: *rec.Result, rec: rec, size: size(k, rec)}
	sh := h.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.m == nil {
		sh.m = make(map[string]*hotEntry)
	}
	delta := e.size
	if old, ok := sh.m[k]; ok {
		delta -= old.size
	} else {
		sh.order = append(sh.order, k)
	}
	sh.m[k] = e
	sh.bytes += delta
	h.bytes.Add(int64(delta))
	// Evict this shard's oldest while the set is over its bound. With ids
	// spread evenly over the shards this is close to evicting the set's
	// oldest; the bound is exceeded by at most a record per shard. Every
	// id kept is queued at least once from head on. An id
	// dropped earlier may still be queued: it is skipped. Each id is queued
	// once per insertion, so the work is constant per put on average.
	for h.bytes.Load() > hotBytes && len(sh.m) > 1 && sh.head < len(sh.order) {
		old := sh.order[sh.head]
		sh.order[sh.head] = ""
		sh.head++
		if old == k {
			// Put again: it is the newest now.
			sh.order = append(sh.order, k)
			continue
		}
		if r, ok := sh.m[old]; ok {
			sh.bytes -= r.size
			h.bytes.Add(-int64(r.size))
			delete(sh.m, old)
		}
	}
	if queued := len(sh.order) - sh.head; queued > 2*len(sh.m)+64 {
		// Ids dropped and put again are queued more than once: keep the
		// latest place of each id still kept.
		seen := make(map[string]bool, len(sh.m))
		kept := make([]string, 0, len(sh.m))
		for i := len(sh.order) - 1; i >= sh.head; i-- {
			if id := sh.order[i]; sh.m[id] != nil && !seen[id] {
				seen[id] = true
				kept = append(kept, id)
			}
		}
		for i, j := 0, len(kept)-1; i < j; i, j = i+1, j-1 {
			kept[i], kept[j] = kept[j], kept[i]
		}
		sh.order, sh.head = kept, 0
	} else if sh.head > len(sh.order)/2 && sh.head > 64 {
		sh.order = append(sh.order[:0:0], sh.order[sh.head:]...)
		sh.head = 0
	}
}

func (h *hotSet) drop(id []byte) {
	sh := h.shard(id)
	sh.mu.Lock()
	if old, ok := sh.m[string(id)]; ok {
		sh.bytes -= old.size
		h.bytes.Add(-int64(old.size))
		delete(sh.m, string(id))
	}
	sh.mu.Unlock()
}

// takeCounts appends the replays counted since the last call to out, one
// Tally per counted entry (an id put again may have two).
func (h *hotSet) takeCounts(out []Tally) []Tally {
	for i := range h.shards {
		sh := &h.shards[i]
		sh.mu.Lock()
		for _, e := range sh.pending {
			out = append(out, Tally{Scope: e.rec.Scope, Key: e.rec.Key, Replays: e.replays,
				LastReplay: fromUnixNanos(e.lastReplay)})
			e.replays = 0
		}
		clear(sh.pending)
		sh.pending = sh.pending[:0]
		sh.mu.Unlock()
	}
	return out
}
