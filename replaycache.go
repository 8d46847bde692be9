package idem

import (
	"hash/maphash"
	"math/bits"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/backend"
)

// The replay cache: done records this Store has completed or read, kept
// decoded in memory so that a replay of a recent key is a map lookup and
// makes no backend call, on every backend. Begin asks it first
// (replayCached).
//
// Why a cached record can be trusted: a done record does not change until
// it expires. No Store operation changes a live done record (its counts
// live beside it, see Tallier); it leaves the storage only by expiry,
// when Sweep (of any process) reclaims it or a request claims the key
// again after its ExpiresAt. A reader re-checks expiry with the store's
// clock on every use, so an expired entry is never served, whatever the
// storage holds by then; Sweep drops the entries of what it reclaims to
// free their memory. An operator action added to the Store that changes
// a done record must drop its entry (hotSet.drop).
//
// The design and its measurements (sharding, the layout of an entry, the
// cost of a clock read) are in docs/replay-cache.md.

// The cache's approximate size is bounded by its share of the memory
// budget (hotSet.limit, memory.go); past it, the entries put longest ago
// in the shard receiving one are evicted first. Results with bodies over
// hotMaxBody are never kept: a large body is rare enough to be read from
// the backend.
const (
	hotMaxBody = 16 << 10

	hotShardBits = 5
	hotShards    = 1 << hotShardBits
)

// hotID names a kept record: its scope and key.
type hotID struct{ scope, key string }

// hotEntry is one kept done record and the replays counted on it that the
// Store has not yet handed to the backend. What a replay reads comes first.
// Everything but the counts is set before the entry is put and never
// changed.
type hotEntry struct {
	fingerprint string
	expiresAt   time.Time

	// replays counts replays answered from this entry since the last
	// flush; lastReplay is the latest one's store time in Unix
	// nanoseconds. Both are guarded by the lock of the entry's shard. An
	// entry is queued on its shard's pending list exactly when replays goes
	// from zero to one, so a flush visits only the entries it must, and a
	// count is never lost: an entry dropped from the map stays on the list
	// until flushed, and is pinned (counted in hotSet.pinned) meanwhile.
	replays    int64
	lastReplay int64
	pinned     bool
	slot       int // its index in the pending list while replays > 0
	// gone is set, under the shard's lock, when the entry leaves the map
	// (evicted, replaced, dropped): its place in the shard's order is
	// then skipped.
	gone bool

	token uint64
	// result is what replays hand out the address of.
	result Result
	id     hotID
	size   int // what size counted for it
}

type hotShard struct {
	mu sync.Mutex // guards the fields below and its entries' counts
	m  hotIndex
	// order holds the entries in the order they were put, oldest at
	// head, each once; the gone ones wait to be skipped. Entries, not
	// ids: eviction needs no lookup of the oldest id, whose key's bytes
	// are rarely in the CPU's caches.
	order []*hotEntry
	head  int // index in order of the oldest entry still queued
	// goneBytes is the size of the gone entries still queued (dropped or
	// replaced before they reached the head), memory the queue keeps
	// alive beyond bytes; evict compacts the queue before it passes
	// bytes/goneShare.
	goneBytes int
	bytes     int
	// pending holds the entries whose replays are not yet flushed.
	pending []*hotEntry
	// Padding keeps two shards' locks out of one cache line.
	_ [64]byte
}

// hotIndex finds a shard's entries by (scope, key); the empty scope's by
// key alone, which hashes one string rather than two. The zero value is
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

// hotSet is the replay cache.
type hotSet struct {
	bytes atomic.Int64 // the sum of the shards' bytes
	// pinned is the size of the entries dropped from the maps whose counts
	// wait for a flush: memory the cache holds beyond its entries. It
	// counts against limit, and past limit/pinnedShare put asks for a
	// flush.
	pinned atomic.Int64
	limit  int64 // the bound on bytes + pinned
	door   doorkeeper
	shards [hotShards]hotShard
}

// doorkeeper admits a record read from the backend into the cache on its
// second read in a window, not its first: with replays spread over many
// more keys than the cache holds, most keys read from the backend are not
// read again before their entry would be evicted, and putting them costs
// the replay the entry, the map's insert and an eviction, whose entry and
// map slot are rarely in the CPU's caches (a fifth of an uncached replay,
// bench/results/notes/replay-from-disk-profile.md). A key replayed
// repeatedly is cached from its second read; a record the Store completed
// is cached at once (Store.keep), so a retry of a recent completion never
// waits for admission. A replay not admitted is counted on a count-only
// entry (hotSet.countOnly).
//
// It is a bitset of one bit per key hash, cleared once a quarter of its
// bits have been set since the last clear: a bit set by another key (at
// most a quarter of them) admits a key on its first read, as the cache did
// before it had a doorkeeper.
type doorkeeper struct {
	bits []atomic.Uint64
	mask uint64
	set  atomic.Int64 // bits set since the last clear
	seed maphash.Seed
}

// doorBytesShare is the cache's limit over the doorkeeper's size: 256
// bytes of cache, about the smallest entry, for each eight bits.
const doorBytesShare = 256

func newDoorkeeper(limit int64) doorkeeper {
	words := uint64(64)
	for words*8 < uint64(limit/doorBytesShare) && words < 1<<21 {
		words <<= 1
	}
	return doorkeeper{bits: make([]atomic.Uint64, words), mask: words - 1, seed: maphash.MakeSeed()}
}

// admit reports whether (scope, key) was seen since the last clear, and
// marks it seen.
func (d *doorkeeper) admit(scope, key string) bool {
	x := maphash.String(d.seed, key)
	if scope != "" {
		x ^= bits.RotateLeft64(maphash.String(d.seed, scope), 31)
	}
	w, bit := &d.bits[(x>>6)&d.mask], uint64(1)<<(x&63)
	if w.Load()&bit != 0 {
		return true
	}
	if w.Or(bit)&bit != 0 {
		return true // another reader of the key set it first
	}
	if d.set.Add(1) >= int64(len(d.bits))*16 {
		// Racing clears clear the same bits: harmless.
		d.set.Store(0)
		for i := range d.bits {
			d.bits[i].Store(0)
		}
	}
	return false
}

// pinnedShare is the share of the cache's limit that entries dropped with
// unflushed counts may hold. A counted entry still in the cache costs
// nothing more than its place on the pending list, so replays of the
// cache's keys, however many, wait for the flush interval (tallyLoop);
// past this share, churn drops the counts of the entries it evicts (and
// the Store records the loss, countledger.go) rather than flushing early.
const pinnedShare = 4

// goneShare and goneSlack bound what a shard's queue keeps of entries
// dropped or replaced before they reached its head: past bytes/goneShare
// plus goneSlack, the next eviction check compacts the queue.
const (
	goneShare = 4
	goneSlack = 64 << 10
)

// newHotSet returns an empty cache holding about limit bytes at most.
func newHotSet(limit int64) *hotSet {
	return &hotSet{limit: limit, door: newDoorkeeper(limit)}
}

// shard returns the shard of (scope, key): a cheap mix of the key's first
// and last bytes and the scope's first, not a hash of every byte (the map
// hashes the key again anyway).
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

// size approximates what an entry costs in memory: the entry and its map
// slot, and the copies of the key, scope and fingerprint, and the result.
func size(id hotID, fp string, res *Result) int {
	n := len(id.key) + len(id.scope) + len(fp) + 240 + len(res.Body) + len(res.Error)
	for k, vs := range res.Header {
		n += len(k)
		for _, v := range vs {
			n += len(v) + 16
		}
	}
	return n
}

// get returns the entry kept for (scope, key), or nil.
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
// is judged again on fresh(), read under the lock, so that a late reading
// never replays an expired record (see coarseSlack). It allocates nothing
// (but for the pending list's growth, at most one place per entry between
// two flushes).
func (h *hotSet) replay(scope, key, fp string, now time.Time, behind time.Duration, fresh func() time.Time,
	count bool) (e *hotEntry, at time.Time) {
	sh := h.shard(scope, key)
	sh.mu.Lock()
	e = sh.m.get(hotID{scope, key})
	if e == nil || e.fingerprint != fp {
		sh.mu.Unlock()
		return nil, now
	}
	if !now.Add(behind).Before(e.expiresAt) {
		if behind > 0 {
			now = fresh()
		}
		if !now.Before(e.expiresAt) {
			sh.mu.Unlock()
			return nil, now
		}
	}
	if count {
		if e.replays == 0 {
			e.slot = len(sh.pending)
			sh.pending = append(sh.pending, e)
		}
		e.replays++
		if ns := now.UnixNano(); ns > e.lastReplay {
			e.lastReplay = ns
		}
	}
	sh.mu.Unlock()
	return e, now
}

// hotRecord is what the replay cache takes of a done record: what a
// replay answers and checks.
type hotRecord struct {
	Fingerprint string
	Token       uint64
	ExpiresAt   time.Time
	Result      *Result
}

// hotOf returns what the replay cache takes of rec.
func hotOf(rec *Record) hotRecord {
	return hotRecord{Fingerprint: rec.Fingerprint, Token: rec.Token, ExpiresAt: rec.ExpiresAt, Result: rec.Result}
}

// put keeps the done record rec of (scope, key): its Fingerprint, Token,
// ExpiresAt and Result, which must not be changed afterwards (the cache
// keeps the Result's header and body, not rec). With count, the new entry
// counts one replay at time at. kept reports whether the cache took rec
// (not when its result is too large); dropped, that evicting made room by
// dropping unflushed counts (hotSet.remove).
func (h *hotSet) put(scope, key string, rec hotRecord, count bool, at time.Time) (kept, dropped bool) {
	if !cacheable(rec) {
		return false, false
	}
	id, fp := ownCopies(scope, key, rec.Fingerprint)
	return h.insert(id, fp, rec, count, at)
}

// ownCopies returns copies of scope, key and fp made in one allocation:
// the caller's strings may share memory with a large request, which the
// cache would otherwise keep alive.
func ownCopies(scope, key, fp string) (hotID, string) {
	var b strings.Builder
	b.Grow(len(key) + len(fp) + len(scope))
	b.WriteString(key)
	b.WriteString(fp)
	b.WriteString(scope)
	all := b.String()
	fpEnd := len(key) + len(fp)
	return hotID{scope: all[fpEnd:], key: all[:len(key)]}, all[len(key):fpEnd]
}

// putRead is put for a record the backend just returned for (scope, key)
// (Backend.Claim hands it over), once the doorkeeper admits it: the entry
// keeps the record's own copies of its scope, key and fingerprint, as it
// keeps its result, instead of copying them again. A record that names
// another key is put as put does. A record not admitted is not kept, and
// with count its replay is counted on a count-only entry: kept then
// reports that the cache took the count.
func (h *hotSet) putRead(scope, key string, rec *Record, count bool, at time.Time) (kept, dropped bool) {
	hr := hotOf(rec)
	if !cacheable(hr) {
		return false, false
	}
	if !h.door.admit(scope, key) {
		if count {
			dropped = h.countOnly(scope, key, hr, at)
		}
		return true, dropped
	}
	if rec.Scope != scope || rec.Key != key {
		return h.put(scope, key, hr, count, at)
	}
	return h.insert(hotID{scope: rec.Scope, key: rec.Key}, rec.Fingerprint, hr, count, at)
}

// countOnly counts a replay at time at of rec, the record of (scope, key)
// the doorkeeper did not admit, on an entry that is in no map and no
// order, only on its shard's pending list: pinned, as an entry evicted
// with unflushed counts is, while the pinned entries hold less than
// limit/pinnedShare; past it the count is dropped and countOnly reports
// dropped. The entry holds copies of the scope and key and no result.
func (h *hotSet) countOnly(scope, key string, rec hotRecord, at time.Time) (dropped bool) {
	sz := len(scope) + len(key) + countOnlySize
	if h.pinned.Load()+int64(sz) > h.limit/pinnedShare {
		return true
	}
	id, _ := ownCopies(scope, key, "")
	e := &hotEntry{expiresAt: rec.ExpiresAt, token: rec.Token, id: id,
		size: sz, replays: 1, lastReplay: at.UnixNano(), pinned: true, gone: true}
	sh := h.shard(scope, key)
	sh.mu.Lock()
	e.slot = len(sh.pending)
	sh.pending = append(sh.pending, e)
	sh.mu.Unlock()
	h.pinned.Add(int64(sz))
	return false
}

// countOnlySize approximates what a count-only entry costs beyond its
// scope and key: the entry and its place on the pending list.
const countOnlySize = 200

// cacheable reports whether the cache takes rec: a result whose body is
// at most hotMaxBody.
func cacheable(rec hotRecord) bool {
	return rec.Result != nil && len(rec.Result.Body) <= hotMaxBody
}

// insert is put with the entry's id and fingerprint given.
func (h *hotSet) insert(k hotID, fp string, rec hotRecord, count bool, at time.Time) (kept, dropped bool) {
	e := &hotEntry{fingerprint: fp, expiresAt: rec.ExpiresAt, token: rec.Token,
		result: *rec.Result, id: k, size: size(k, fp, rec.Result)}
	if count {
		e.replays, e.lastReplay = 1, at.UnixNano()
	}
	sh := h.shard(k.scope, k.key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if count {
		e.slot = len(sh.pending)
		sh.pending = append(sh.pending, e)
	}
	if old := sh.m.get(k); old != nil {
		dropped = h.remove(sh, k, old)
		sh.goneBytes += old.size
	}
	sh.order = append(sh.order, e)
	sh.m.set(k, e)
	sh.bytes += e.size
	h.bytes.Add(int64(e.size))
	return true, h.evict(sh, e) || dropped
}

// remove deletes the entry e of id from sh. If its counts wait for a
// flush it pins it, while the pinned entries hold less than
// limit/pinnedShare; otherwise it drops the counts and reports dropped.
// Called with sh.mu held.
func (h *hotSet) remove(sh *hotShard, id hotID, e *hotEntry) (dropped bool) {
	sh.bytes -= e.size
	h.bytes.Add(-int64(e.size))
	sh.m.del(id)
	e.gone = true
	if e.replays > 0 && !e.pinned {
		if h.pinned.Load()+int64(e.size) > h.limit/pinnedShare {
			// Off the pending list too, so that nothing keeps it: it is
			// in no map, so nothing counts on it again.
			last := sh.pending[len(sh.pending)-1]
			sh.pending[e.slot], last.slot = last, e.slot
			sh.pending[len(sh.pending)-1] = nil
			sh.pending = sh.pending[:len(sh.pending)-1]
			e.replays = 0
			return true
		}
		e.pinned = true
		h.pinned.Add(int64(e.size))
	}
	return false
}

// evict drops sh's oldest entries while the cache is over its limit,
// keeping e, the one just put. With ids spread evenly over the shards this
// is close to evicting the cache's oldest; the limit is exceeded by at
// most an entry per shard. Each entry is queued once, when it is put, so
// the work is constant per put on average. It reports whether it dropped
// unflushed counts (remove). Called with sh.mu held.
func (h *hotSet) evict(sh *hotShard, e *hotEntry) (dropped bool) {
	for h.bytes.Load()+h.pinned.Load() > h.limit && sh.m.len() > 1 && sh.head < len(sh.order) {
		old := sh.order[sh.head]
		sh.order[sh.head] = nil
		sh.head++
		switch {
		case old == e:
			// Not reached while another entry is kept (each is queued
			// once, e last); kept queued all the same.
			sh.order = append(sh.order, e)
		case old.gone:
			sh.goneBytes -= old.size
		case h.remove(sh, old.id, old):
			dropped = true
		}
	}
	if queued := len(sh.order) - sh.head; queued > 2*sh.m.len()+64 || sh.goneBytes > sh.bytes/goneShare+goneSlack {
		// Entries replaced or dropped wait in the queue: keep the others.
		kept := make([]*hotEntry, 0, sh.m.len())
		for _, q := range sh.order[sh.head:] {
			if !q.gone {
				kept = append(kept, q)
			}
		}
		sh.order, sh.head, sh.goneBytes = kept, 0, 0
	} else if sh.head > len(sh.order)/2 && sh.head > 64 {
		sh.order = append(sh.order[:0:0], sh.order[sh.head:]...)
		sh.head = 0
	}
	return dropped
}

// drop forgets the entry of (scope, key) if it holds the record with
// token, or any entry when token is 0. Its unflushed counts are kept
// (pinned) whatever the pinned entries hold: drops are rare (an operator's
// action, a reclaim) and their counts few.
func (h *hotSet) drop(scope, key string, token uint64) {
	sh := h.shard(scope, key)
	k := hotID{scope, key}
	sh.mu.Lock()
	if old := sh.m.get(k); old != nil && (token == 0 || old.token == token) {
		sh.bytes -= old.size
		h.bytes.Add(-int64(old.size))
		sh.m.del(k)
		old.gone = true
		sh.goneBytes += old.size
		if old.replays > 0 && !old.pinned {
			old.pinned = true
			h.pinned.Add(int64(old.size))
		}
	}
	sh.mu.Unlock()
}

// takeCounts appends the replays counted since the last call to out, one
// Tally per counted entry (an id put again may have two).
func (h *hotSet) takeCounts(out []backend.Tally) []backend.Tally {
	// Room for the entries counted by now, so that a flush of many
	// records does not copy its batch at every doubling; later counts
	// append as usual.
	n := 0
	for i := range h.shards {
		sh := &h.shards[i]
		sh.mu.Lock()
		n += len(sh.pending)
		sh.mu.Unlock()
	}
	out = slices.Grow(out, n)
	for i := range h.shards {
		sh := &h.shards[i]
		sh.mu.Lock()
		for _, e := range sh.pending {
			if e.replays == 0 {
				continue // its counts were dropped (remove)
			}
			t := backend.Tally{Scope: e.id.scope, Key: e.id.key, Replays: e.replays, ExpiresAt: e.expiresAt, Token: e.token}
			if e.lastReplay != 0 {
				t.LastReplay = time.Unix(0, e.lastReplay)
			}
			out = append(out, t)
			e.replays = 0
			if e.pinned {
				e.pinned = false
				h.pinned.Add(-int64(e.size))
			}
		}
		clear(sh.pending)
		sh.pending = sh.pending[:0]
		sh.mu.Unlock()
	}
	return out
}

// keep puts the done record rec of (scope, key) in the replay cache.
func (s *Store) keep(scope, key string, rec hotRecord) {
	if _, dropped := s.hot.put(scope, key, rec, false, time.Time{}); dropped {
		s.ledger.dropped.Store(true)
	}
}
