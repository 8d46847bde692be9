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

// hotBytes bounds the set's approximate size; past it, the records put
// longest ago are evicted first. Records with bodies over hotMaxBody are
// never kept: a large body is rare enough to be read from the store.
const (
	hotBytes   = 16 << 20
	hotMaxBody = 16 << 10
)

type hotSet struct {
	mu    sync.RWMutex // guards the fields below
	m     map[string]*Record
	order []string // ids in the order they were put, oldest at head
	head  int      // index in order of the oldest id still queued
	bytes int
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
	k := string(id)
	n := size(k, rec)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = make(map[string]*Record)
	}
	if old, ok := h.m[k]; ok {
		h.bytes -= size(k, old)
	} else {
		h.order = append(h.order, k)
	}
	h.m[k] = rec
	h.bytes += n
	// Evict oldest first. An id dropped earlier may still be queued: it
	// is skipped. Each id is queued once per insertion, so the work is
	// constant per put on average.
	for h.bytes > hotBytes && h.head < len(h.order) {
		old := h.order[h.head]
		h.order[h.head] = ""
		h.head++
		if r, ok := h.m[old]; ok && old != k {
			h.bytes -= size(old, r)
			delete(h.m, old)
		}
	}
	if queued := len(h.order) - h.head; queued > 2*len(h.m)+1024 {
		// Ids dropped and put again are queued more than once: keep the
		// latest place of each id still kept.
		seen := make(map[string]bool, len(h.m))
		kept := make([]string, 0, len(h.m))
		for i := len(h.order) - 1; i >= h.head; i-- {
			if id := h.order[i]; h.m[id] != nil && !seen[id] {
				seen[id] = true
				kept = append(kept, id)
			}
		}
		for i, j := 0, len(kept)-1; i < j; i, j = i+1, j-1 {
			kept[i], kept[j] = kept[j], kept[i]
		}
		h.order, h.head = kept, 0
	} else if h.head > len(h.order)/2 && h.head > 1024 {
		h.order = append(h.order[:0:0], h.order[h.head:]...)
		h.head = 0
	}
}

func (h *hotSet) drop(id []byte) {
	h.mu.Lock()
	if old, ok := h.m[string(id)]; ok {
		h.bytes -= size(string(id), old)
		delete(h.m, string(id))
	}
	h.mu.Unlock()
}
