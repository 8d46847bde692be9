package badgerstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/internal/badger"
	"github.com/idemkit/idem/internal/engine"
)

// Counts beside records.
//
// Replays are counted in memory and reach the backend in batches
// (the root package's counts.go). Rewriting a whole record to add to its counts would cost a
// read, a decode, an encode and a write of the record per counted key and
// flush. So the counts of a done or released record are kept beside it,
// under prefixCounts: one small entry holding the counts added since the
// record was last written whole. Get and Scan add them to the record's own.
//
// Such an entry has its record's Badger TTL, so that neither outlives the
// other; Reclaim deletes both; a claim of a released record folds the
// entry into the new record (the life goes on), and a claim of an expired
// one deletes it (a new life starts at zero). An in-progress record (no
// TTL, and rewritten by its completion anyway) gets its counts written
// into it.

// countsFormat is the version of the encoding of the counts beside a
// record: the version byte, then varints of the replays, conflicts and
// mismatches and of the last replay's and last rejection's Unix
// nanoseconds (0 for none).
const countsFormat = 1

// talliedCache remembers, for records whose counts are kept beside them,
// their Badger expiry and the counts stored, so that a flush writes new
// counts without reading either.
type talliedCache struct {
	// limit bounds the records kept (the memory budget's share,
	// badgerSharesOf); past it an arbitrary one is dropped, and read from
	// the store when counted again.
	limit int
	// flushMu serialises AddTallies calls, so that no two of their ops
	// share a unit: an op is then the only reader of what it put in m
	// before its writes were stored.
	flushMu sync.Mutex
	// mu guards m. A write or a deletion of a record drops its entry at
	// once, in its op; an AddTallies op sets entries as it writes, and
	// AddTallies clears the map if an op failed.
	mu sync.Mutex
	m  map[string]talliedRecord
}

// talliedRecord is what the store holds of a record whose counts are kept
// beside it: 48 bytes, the counts without the names a Tally carries
// (with its key and the map's slot, about 200 bytes a record).
type talliedRecord struct {
	expiresAt uint64     // the record's Badger expiry, which its counts share
	counts    keptCounts // the counts beside it
}

// keptCounts are a Tally's counts, its times in Unix nanoseconds (0 for
// none).
type keptCounts struct {
	replays, conflicts, mismatches int64
	lastReplay, lastRejection      int64
}

// add adds u's counts to c, as Tally.add does.
func (c *keptCounts) add(u backend.Tally) {
	c.replays += u.Replays
	c.conflicts += u.Conflicts
	c.mismatches += u.Mismatches
	c.lastReplay = max(c.lastReplay, unixNanos(u.LastReplay))
	c.lastRejection = max(c.lastRejection, unixNanos(u.LastRejection))
}

func (c *talliedCache) forget(id []byte) {
	c.mu.Lock()
	delete(c.m, string(id))
	c.mu.Unlock()
}

func (c *talliedCache) get(id []byte) (talliedRecord, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.m[string(id)]
	return r, ok
}

func (c *talliedCache) set(id []byte, r talliedRecord) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[string]talliedRecord)
	}
	if _, kept := c.m[string(id)]; !kept && len(c.m) >= max(c.limit, 1) {
		for k := range c.m {
			delete(c.m, k)
			break
		}
	}
	c.m[string(id)] = r
}

func (c *talliedCache) clear() {
	c.mu.Lock()
	c.m = nil
	c.mu.Unlock()
}

func encodeCounts(c keptCounts) []byte {
	b := make([]byte, 0, 1+5*binary.MaxVarintLen64)
	b = append(b, countsFormat)
	b = binary.AppendVarint(b, c.replays)
	b = binary.AppendVarint(b, c.conflicts)
	b = binary.AppendVarint(b, c.mismatches)
	b = binary.AppendVarint(b, c.lastReplay)
	return binary.AppendVarint(b, c.lastRejection)
}

func decodeCounts(v []byte) (backend.Tally, error) {
	var t backend.Tally
	if len(v) == 0 || v[0] != countsFormat {
		return t, fmt.Errorf("%w: counts of an unknown format", backend.ErrCorrupt)
	}
	v = v[1:]
	var f [5]int64
	for i := range f {
		n, k := binary.Varint(v)
		if k <= 0 {
			return t, fmt.Errorf("%w: truncated counts", backend.ErrCorrupt)
		}
		f[i], v = n, v[k:]
	}
	if len(v) != 0 {
		return t, fmt.Errorf("%w: counts with %d trailing bytes", backend.ErrCorrupt, len(v))
	}
	t.Replays, t.Conflicts, t.Mismatches = f[0], f[1], f[2]
	t.LastReplay, t.LastRejection = fromUnixNanos(f[3]), fromUnixNanos(f[4])
	return t, nil
}

func unixNanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromUnixNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// readCounts reads the counts beside the record of id, as the op t (or a
// reader outside the committer, t nil) sees them; none or corrupt ones
// read as zero (counts are the record's story, never a reason to refuse
// the record).
func (b *Backend) readCounts(t *engine.Txn, id []byte) (backend.Tally, error) {
	var c backend.Tally
	_, err := b.eng.Read(t, withPrefix(prefixCounts, id), func(v []byte, _ uint64) error {
		c, _ = decodeCounts(v)
		return nil
	})
	return c, err
}

// storedCounts reads the counts beside the record of id in a Badger scan.
func storedCounts(txn *badger.Txn, id []byte) (backend.Tally, error) {
	item, err := txn.Get(withPrefix(prefixCounts, id))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return backend.Tally{}, nil
	}
	if err != nil {
		return backend.Tally{}, err
	}
	var c backend.Tally
	err = item.Value(func(v []byte) error {
		c, _ = decodeCounts(v)
		return nil
	})
	return c, err
}

// AddTallies implements Tallier. It merges the tallies of each record,
// then adds them in ops of bounded size: beside a done or released record,
// into an in-progress one. A record that no longer exists is skipped. An
// error may leave the ops before it applied.
func (b *Backend) AddTallies(ctx context.Context, tallies []backend.Tally) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	type counted struct {
		id []byte
		t  backend.Tally
	}
	index := make(map[string]int, len(tallies))
	all := make([]counted, 0, len(tallies))
	for _, t := range tallies {
		if len(t.Scope) > backend.MaxScopeLen {
			continue // no such record can exist
		}
		id := recordID(t.Scope, t.Key)
		if i, ok := index[string(id)]; ok {
			all[i].t.Add(t)
			continue
		}
		index[string(id)] = len(all)
		all = append(all, counted{id, t})
	}
	// An op writes at most half of what a Badger transaction holds, so
	// that a large batch never outgrows one.
	size, count := b.eng.MaxBatch()
	opBytes, opMax := int(size/2), int(count/2)
	b.counts.flushMu.Lock()
	defer b.counts.flushMu.Unlock()
	for len(all) > 0 {
		var n int
		err := b.update(func(w *engine.Txn) error {
			n = 0
			written := 0
			for _, c := range all {
				if n == opMax || written > opBytes {
					break
				}
				size, err := b.addTally(w, c.id, c.t)
				if err != nil {
					return err
				}
				n++
				written += size
			}
			return nil
		})
		if err != nil {
			// The op's writes were not stored, but what it cached was.
			b.counts.clear()
			return backend.Unavailable("tally", err)
		}
		all = all[n:]
	}
	return nil
}

// addTally adds c to the record of id, and returns about how many bytes
// it wrote. For a record in the cache it reads nothing.
func (b *Backend) addTally(t *engine.Txn, id []byte, c backend.Tally) (int, error) {
	r, ok := b.counts.get(id)
	if !ok {
		rec, expiresAt, err := b.readRecord(t, id)
		if errors.Is(err, backend.ErrCorrupt) {
			return 0, nil // left for an operator
		}
		if err != nil {
			return 0, err
		}
		if rec == nil {
			return 0, nil // reclaimed since
		}
		if rec.State == backend.StateInProgress {
			rec.AddTally(c)
			v := backend.EncodeRecord(rec)
			t.Set(withPrefix(prefixRecord, id), v, expiresAt)
			t.OnCommit(func() { b.reopen(id, v) })
			return len(v), nil
		}
		r.expiresAt = expiresAt
		stored, err := b.readCounts(t, id)
		if err != nil {
			return 0, err
		}
		r.counts.add(stored)
	}
	r.counts.add(c)
	key, v := withPrefix(prefixCounts, id), encodeCounts(r.counts)
	b.counts.set(id, r)
	t.Set(key, v, r.expiresAt)
	return len(key) + len(v), nil
}
