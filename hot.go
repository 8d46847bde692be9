package idem

import (
	"math/bits"
	"strings"
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
// store's clock on every use (on its latest reading, see coarseSlack).
//
// The set is split into shards by a hash of the scope and key, each with its
// own lock, so that replays of different keys on different cores do not
// queue on one lock. A replay takes its shard's lock once, for the lookup
// and for counting the replay in the entry: the counts are plain fields
// under that lock, so counting adds no atomic operation to a replay (a
// read lock would cost the same two as the mutex, and atomic counts two
// more). The bound on its size is the whole set's, so a poor
// spread of keys over the shards costs only some contention: the shard hash
// is a cheap mix of the key's first and last bytes rather than a hash of
// all of them (the map hashes the key again anyway).
//
// Entries are found by (scope, key) as the request gives them, not by the
// record id the backend stores them under: building an id copies scope and
// key into a buffer, and the map's hash then reads the copy back before the
// stores have landed, which costs more than the rest of the lookup.

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

// hotID names a kept record: its scope and key.
type hotID struct{ scope, key string }

// hotEntry is one kept record and the replays counted on it that the
// Store has not yet handed to the backend. What a replay reads and writes
// comes first, within one cache line; the fingerprint's bytes follow the
// key's, which the map lookup has just read. Everything but the counts is
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
	m     hotIndex
	order []hotID // ids in the order they were put, oldest at head
	head  int     // index in order of the oldest id still queued
	bytes int
	// pending holds the entries whose replays are not yet flushed.
	pending []*hotEntry
	// Padding keeps two shards' locks out of one cache line.
	_ [64]byte
}

// hotIndex finds a shard's entries by (scope, key). The empty scope's
// have a map of their own, by key alone, which hashes and compares one
// string rather than two: most stores serve one scope. The zero value is
// empty.
type hotIndex struct {
	keys   map[string]*hotEntry // the empty scope's entries, by key
	scoped map[hotID]*hotEntry  // the other scopes' entries
}

func (x *hotIndex) get(id hotID) *hotEntry {
	if id.scope == "" {
		return x.keys[id.key]
	}
	return x.scoped[id]
}

func (x *hotIndex) set(id hotID, e *hotEntry) {
	if id.scope == "" {
		if x.keys == nil {
			x.keys = make(map[string]*hotEntry)
		}
		x.keys[id.key] = e
		return
	}
	if x.scoped == nil {
		x.scoped = make(map[hotID]*hotEntry)
	}
	x.scoped[id] = e
}

func (x *hotIndex) del(id hotID) {
	if id.scope == "" {
		delete(x.keys, id.key)
	} else {
		delete(x.scoped, id)
	}
}

func (x *hotIndex) len() int { return len(x.keys) + len(x.scoped) }

// hotSet is the set of kept records. The zero value is empty and ready.
type hotSet struct {
	bytes  atomic.Int64 // the sum of the shards' bytes
	shards [hotShards]hotShard
}

// shard returns the shard of (scope, key). The scope is mixed in only by
// its length and first bytes: keys alone spread well enough, and the empty
// scope costs nothing.
func (h *hotSet) shard(scope, key string) *hotShard {
	first, last := ends(key)
	if scope != "" {
		s, _ := ends(scope)
		first ^= bits.RotateLeft64(s, 17) ^ uint64(len(scope))<<32
	}
	x := (first ^ bits.RotateLeft64(last, 29) ^ uint64(len(key))) * 0x9e3779b97f4a7c15
	return &h.shards[x>>(64-hotShardBits)]
}

// ends returns s's first and last eight bytes, or s's bytes and 0 when it
// is shorter.
func ends(s string) (first, last uint64) {
	if n := len(s); n >= 8 {
		return le64(s), le64(s[n-8:])
	}
	for i := 0; i < len(s); i++ {
		first = first<<8 | uint64(s[i])
	}
	return first, 0
}

// le64 reads s's first eight bytes as a little-endian number (one load).
func le64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// size approximates what a kept record costs in memory: the entry and its
// map slot, the record, and the copies of the key and fingerprint.
func size(rec *Record) int {
	n := 2*(len(rec.Key)+len(rec.Scope)+len(rec.Fingerprint)) + 272 + len(rec.Attempts)*72
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

// get returns the entry kept for (scope, key), or nil. It allocates
// nothing.
func (h *hotSet) get(scope, key string) *hotEntry {
	sh := h.shard(scope, key)
	sh.mu.Lock()
	e := sh.m.get(hotID{scope, key})
	sh.mu.Unlock()
	return e
}

// replay returns the entry kept for (scope, key) if its fingerprint is fp
// and it has not expired, and then, if count, counts a replay on it at the
// time it was judged at, which it returns. now is a reading of the store's
// clock that may be up to behind older than the current time (0 for a
// fresh reading): an entry live at now+behind is live now; one that is not
// is judged again on fresh(), read under the lock (rare: only a record
// near its expiry needs it), so that a reading at most behind old never
// replays an expired record. full reports that the shard's pending list
// has grown to its share of maxTallies, so that the caller can ask for an
// early flush. It allocates nothing (but for the pending list's growth).
func (h *hotSet) replay(scope, key, fp string, now time.Time, behind time.Duration, fresh func() time.Time,
	count bool) (e *hotEntry, at time.Time, full bool) {
	sh := h.shard(scope, key)
	sh.mu.Lock()
	e = sh.m.get(hotID{scope, key})
	if e == nil || e.fingerprint != fp {
		sh.mu.Unlock()
		return nil, now, false
	}
	if !now.Add(behind).Before(e.expiresAt) {
		if behind > 0 {
			now = fresh()
		}
		if !now.Before(e.expiresAt) {
			sh.mu.Unlock()
			return nil, now, false
		}
	}
	if count {
		if e.replays == 0 {
			sh.pending = append(sh.pending, e)
			full = len(sh.pending) >= maxTallies/hotShards
		}
		e.replays++
		if ns := now.UnixNano(); ns > e.lastReplay {
			e.lastReplay = ns
		}
	}
	sh.mu.Unlock()
	return e, now, full
}

// put keeps rec, the record stored under (scope, key), which must be done
// (with a result) and must not be changed afterwards.
func (h *hotSet) put(scope, key string, rec *Record) {
	if rec.Result == nil || len(rec.Result.Body) > hotMaxBody {
		return
	}
	// One allocation for the map's key and scope and the fingerprint: the
	// caller's strings may share memory with a large request, which the
	// set would otherwise keep alive, and a replay compares the
	// fingerprint next to the key it has just read.
	var b strings.Builder
	b.Grow(len(key) + len(rec.Fingerprint) + len(scope))
	b.WriteString(key)
	b.WriteString(rec.Fingerprint)
	b.WriteString(scope)
	all := b.String()
	fpEnd := len(key) + len(rec.Fingerprint)
	k := hotID{scope: all[fpEnd:], key: all[:len(key)]}
	e := &hotEntry{fingerprint: all[len(key):fpEnd], expiresAt: rec.ExpiresAt, token: rec.Token,
		result: *rec.Result, rec: rec, size: size(rec)}
	sh := h.shard(k.scope, k.key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	delta := e.size
	if old := sh.m.get(k); old != nil {
		delta -= old.size
	} else {
		sh.order = append(sh.order, k)
	}
	sh.m.set(k, e)
	sh.bytes += delta
	h.bytes.Add(int64(delta))
	// Evict this shard's oldest while the set is over its bound. With ids
	// spread evenly over the shards this is close to evicting the set's
	// oldest; the bound is exceeded by at most a record per shard. Every
	// id kept is queued at least once from head on. An id
	// dropped earlier may still be queued: it is skipped. Each id is queued
	// once per insertion, so the work is constant per put on average.
	for h.bytes.Load() > hotBytes && sh.m.len() > 1 && sh.head < len(sh.order) {
		old := sh.order[sh.head]
		sh.order[sh.head] = hotID{}
		sh.head++
		if old == k {
			// Put again: it is the newest now.
			sh.order = append(sh.order, k)
			continue
		}
		if r := sh.m.get(old); r != nil {
			sh.bytes -= r.size
			h.bytes.Add(-int64(r.size))
			sh.m.del(old)
		}
	}
	if queued := len(sh.order) - sh.head; queued > 2*sh.m.len()+64 {
		// Ids dropped and put again are queued more than once: keep the
		// latest place of each id still kept.
		seen := make(map[hotID]bool, sh.m.len())
		kept := make([]hotID, 0, sh.m.len())
		for i := len(sh.order) - 1; i >= sh.head; i-- {
			if id := sh.order[i]; sh.m.get(id) != nil && !seen[id] {
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

func (h *hotSet) drop(scope, key string) {
	sh := h.shard(scope, key)
	k := hotID{scope, key}
	sh.mu.Lock()
	if old := sh.m.get(k); old != nil {
		sh.bytes -= old.size
		h.bytes.Add(-int64(old.size))
		sh.m.del(k)
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
