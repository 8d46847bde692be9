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

// hotBytes bounds the set's approximate size; past it, arbitrary entries
// are evicted. Records with bodies over hotMaxBody are never kept: a large
// body is rare enough to be read from the store.
const (
	hotBytes   = 4 << 20
	hotMaxBody = 16 << 10
)

type hotSet struct {
	mu    sync.RWMutex // guards m and bytes
	m     map[string]*Record
	bytes int
}

// size approximates what a kept record costs in memory.
func size(id []byte, rec *Record) int {
	n := len(id) + len(rec.Fingerprint) + 512 + len(rec.Attempts)*64
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

func (h *hotSet) get(id []byte) *Record {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.m[string(id)]
}

// put keeps rec, which must be done and must not be changed afterwards.
func (h *hotSet) put(id []byte, rec *Record) {
	if rec.Result != nil && len(rec.Result.Body) > hotMaxBody {
		return
	}
	n := size(id, rec)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = make(map[string]*Record)
	}
	if old, ok := h.m[string(id)]; ok {
		h.bytes -= size(id, old)
	}
	for k, v := range h.m {
		if h.bytes+n <= hotBytes {
			break
		}
		h.bytes -= size([]byte(k), v)
		delete(h.m, k)
	}
	h.m[string(id)] = rec
	h.bytes += n
}

func (h *hotSet) drop(id []byte) {
	h.mu.Lock()
	if old, ok := h.m[string(id)]; ok {
		h.bytes -= size(id, old)
		delete(h.m, string(id))
	}
	h.mu.Unlock()
}
