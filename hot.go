package idem

import "sync"

// The Badger backend's hot set: decoded done records, so that a replay of
// a recent key is a map lookup rather than a read through the LSM tree and
// a msgpack decode.
//
// Why a cached record can be trusted: a done record does not change until
// it expires, except for its counts (Replays and the like), which a replay
// does not need. Whatever deletes or replaces a record (Reclaim, a claim of
// an expired record, AddTallies) drops it from the set after its commit,
// and a reader re-checks expiry with the store's clock on every use.

// hotMax bounds the set; past it, an arbitrary entry is evicted.
const hotMax = 1 << 14

type hotSet struct {
	mu sync.RWMutex // guards m
	m  map[string]*Record
}

func (h *hotSet) get(id []byte) *Record {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.m[string(id)]
}

// put keeps rec, which must be done and must not be changed afterwards.
func (h *hotSet) put(id []byte, rec *Record) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = make(map[string]*Record)
	}
	if len(h.m) >= hotMax {
		for k := range h.m {
			delete(h.m, k)
			break
		}
	}
	h.m[string(id)] = rec
}

func (h *hotSet) drop(id []byte) {
	h.mu.Lock()
	delete(h.m, string(id))
	h.mu.Unlock()
}
