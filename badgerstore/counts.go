package badgerstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/internal/badger"
	"github.com/idemkit/idem/internal/engine"
)

// Counts beside records.
//
// Replays are counted in memory and reach the backend in batches (the
// root package's counts.go). A flush must cost the replays nothing it can
// avoid: it writes, and never reads. Each flush adds, for each done record
// it counts, one small entry beside the record under prefixCounts, keyed
// by the record's id, its fencing token (the claim that completed it: the
// record's life) and a number unique to the flush, holding the counts of
// that flush alone. The Tally carries the token and the record's expiry,
// from which the entry takes its Badger TTL, so that it expires with its
// record without the record being read. Get and Scan add up the entries
// of a record under its token: those of an earlier life of the key (before
// a claim after its expiry) are never counted; the reclaim deletes those
// it finds, and the others expire on their own.
//
// The rare tallies taken on a claim in progress (conflicts, mismatches)
// carry no expiry: they are added into the record itself, which the open
// claims keep in memory (resident), so that they too cost no disk read.
// A released record is never replayed or refused, so its counts are in
// the record, and go on with it when it is claimed again.

// countsFormat is the version of the encoding of a counts entry: the
// version byte, then varints of the replays, conflicts and mismatches and
// of the last replay's and last rejection's Unix nanoseconds (0 for
// none).
const countsFormat = 1

// keyLayout is the version of the Badger key layout this release writes
// (CHANGELOG's formats table). Layout 1 kept one counts entry per record,
// t + id, updated by reading it; Open migrates it to layout 2.
const keyLayout = 2

// layoutKey holds the key layout's version, one byte; a store without it
// is at layout 1.
var layoutKey = []byte("s/layout")

// prefixCountsV1 is layout 1's prefix of counts entries, t + id, read
// only by the migration.
const prefixCountsV1 = 't'

// stampLen is the length of a counts entry's stamp: its record's token,
// and the flush's own number, big-endian.
const stampLen = 16

// countsKey is the key of the counts added by the flush numbered flush to
// the record of id whose token is token.
func countsKey(id []byte, token, flush uint64) []byte {
	k := make([]byte, 0, 1+len(id)+stampLen)
	k = append(k, prefixCounts)
	k = append(k, id...)
	k = binary.BigEndian.AppendUint64(k, token)
	return binary.BigEndian.AppendUint64(k, flush)
}

// nextFlush returns a number no other flush of the store took. Flushes
// are numbered from the wall clock's nanoseconds at open on, so that those
// of another process life get other numbers. It runs on the committer
// only.
func (b *Backend) nextFlush() uint64 {
	b.lastFlush = max(b.lastFlush+1, uint64(time.Now().UnixNano()))
	return b.lastFlush
}

func encodeCounts(c backend.Tally) []byte {
	b := make([]byte, 0, 1+5*binary.MaxVarintLen64)
	b = append(b, countsFormat)
	b = binary.AppendVarint(b, c.Replays)
	b = binary.AppendVarint(b, c.Conflicts)
	b = binary.AppendVarint(b, c.Mismatches)
	b = binary.AppendVarint(b, unixNanos(c.LastReplay))
	return binary.AppendVarint(b, unixNanos(c.LastRejection))
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

// countsReader adds up counts entries in a Badger read transaction. One
// iterator serves every record of a scan, seeking to each in turn.
type countsReader struct {
	it *badger.Iterator
}

func newCountsReader(txn *badger.Txn) *countsReader {
	return &countsReader{it: txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixCounts}})}
}

func (r *countsReader) close() { r.it.Close() }

// keys returns the keys of the counts entries beside the record of id.
func (r *countsReader) keys(id []byte) [][]byte {
	var out [][]byte
	prefix := withPrefix(prefixCounts, id)
	for r.it.Seek(prefix); r.it.ValidForPrefix(prefix); r.it.Next() {
		if k := r.it.Item().Key(); len(k) == len(prefix)+stampLen {
			out = append(out, bytes.Clone(k))
		}
	}
	return out
}

// add adds to rec the counts of the entries beside it written after its
// claim. Corrupt entries read as zero: counts are the record's story,
// never a reason to refuse the record.
func (r *countsReader) add(id []byte, rec *backend.Record) {
	prefix := withPrefix(prefixCounts, id)
	for r.it.Seek(prefix); r.it.ValidForPrefix(prefix); r.it.Next() {
		k := r.it.Item().Key()
		if len(k) != len(prefix)+stampLen {
			continue // the entry of a longer id with this one as prefix
		}
		if binary.BigEndian.Uint64(k[len(prefix):]) != rec.Token {
			continue // an earlier life's
		}
		_ = r.it.Item().Value(func(v []byte) error {
			if c, err := decodeCounts(v); err == nil {
				rec.AddTally(c)
			}
			return nil
		})
	}
}

// addCounts adds to rec, the record of id, the counts beside it, as Badger
// holds them once every answered write is in it.
func (b *Backend) addCounts(id []byte, rec *backend.Record) error {
	return b.eng.View(func(txn *badger.Txn) error {
		r := newCountsReader(txn)
		defer r.close()
		r.add(id, rec)
		return nil
	})
}

// AddTallies implements Tallier. It merges the tallies of each record,
// then adds them in ops of bounded size, each with a stamp of its own: a tally taken on a done record becomes an entry beside it,
// written without reading anything; one taken on a claim in progress is
// added into the record. A record that no longer exists is skipped. An
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
	opBytes, opMax := int(size/2), int(count/2)-1
	for len(all) > 0 {
		var n int
		err := b.update(func(w *engine.Txn) error {
			n = 0
			written := 0
			flush := b.nextFlush()
			for _, c := range all {
				if n == opMax || written > opBytes {
					break
				}
				size, err := b.addTally(w, flush, c.id, c.t)
				if err != nil {
					return err
				}
				n++
				written += size
			}
			return nil
		})
		if err != nil {
			return backend.Unavailable("tally", err)
		}
		all = all[n:]
	}
	return nil
}

// addTally adds c to the record of id in the op t, beside it as the flush
// numbered flush if it is done, and returns about how many bytes it wrote.
func (b *Backend) addTally(t *engine.Txn, flush uint64, id []byte, c backend.Tally) (int, error) {
	var exp uint64
	token := c.Token
	if at := latest(c); !c.ExpiresAt.IsZero() && token != 0 && !at.IsZero() {
		// Counted on a done record: its Badger TTL, as put set it.
		exp = badgerTTL(max(c.ExpiresAt.Sub(at), 0) + reclaimGrace)
	} else {
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
		if rec.State != backend.StateDone {
			rec.AddTally(c)
			v := backend.EncodeRecord(rec)
			t.Set(withPrefix(prefixRecord, id), v, expiresAt)
			t.OnCommit(func() { b.reopen(id, v) })
			return len(v), nil
		}
		exp, token = expiresAt, rec.Token
	}
	key, v := countsKey(id, token, flush), encodeCounts(c)
	t.Set(key, v, exp)
	return len(key) + len(v), nil
}

// latest returns the store's time of the latest count in c.
func latest(c backend.Tally) time.Time {
	if c.LastRejection.After(c.LastReplay) {
		return c.LastRejection
	}
	return c.LastReplay
}

// migrateCounts moves the counts of key layout 1 (one entry per record,
// t + id, beside a done or released record) to layout 2, in ops of
// bounded size, and then records the layout. Each op writes its entries'
// replacements and deletes them at once, so an interrupted migration goes
// on at the next open; so does one of entries an earlier release wrote
// into a store of layout 2 (it ignores the layout). A read-only store is
// left as it is, and reads layout 1's counts as none.
func (b *Backend) migrateCounts() error {
	var layout byte = 1
	err := b.eng.View(func(txn *badger.Txn) error {
		item, err := txn.Get(layoutKey)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return item.Value(func(v []byte) error {
			if len(v) != 1 {
				return fmt.Errorf("%w: key layout version of %d bytes", backend.ErrCorrupt, len(v))
			}
			layout = v[0]
			return nil
		})
	})
	switch {
	case err != nil:
		return err
	case layout > keyLayout:
		return fmt.Errorf("%w: key layout %d, this release knows up to %d", backend.ErrCorrupt, layout, keyLayout)
	case b.ro:
		return nil
	}
	type old struct {
		id, val []byte
		exp     uint64
	}
	for {
		var batch []old
		err := b.eng.View(func(txn *badger.Txn) error {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixCountsV1}})
			defer it.Close()
			for it.Rewind(); it.Valid() && len(batch) < 1000; it.Next() {
				item := it.Item()
				v, err := item.ValueCopy(nil)
				if err != nil {
					return err
				}
				batch = append(batch, old{id: bytes.Clone(item.Key()[1:]), val: v, exp: item.ExpiresAt()})
			}
			return nil
		})
		if err != nil || (len(batch) == 0 && layout == keyLayout) {
			return err
		}
		err = b.update(func(t *engine.Txn) error {
			if len(batch) == 0 {
				t.Set(layoutKey, []byte{keyLayout}, 0)
				return nil
			}
			flush := b.nextFlush()
			for _, o := range batch {
				t.Delete(withPrefix(prefixCountsV1, o.id))
				c, err := decodeCounts(o.val)
				if err != nil {
					continue // unreadable counts count as none
				}
				rec, expiresAt, err := b.readRecord(t, o.id)
				if err != nil && !errors.Is(err, backend.ErrCorrupt) {
					return err
				}
				switch {
				case rec == nil:
				case rec.State == backend.StateDone:
					t.Set(countsKey(o.id, rec.Token, flush), o.val, o.exp)
				default: // released: its counts go on in the record
					rec.AddTally(c)
					t.Set(withPrefix(prefixRecord, o.id), backend.EncodeRecord(rec), expiresAt)
				}
			}
			return nil
		})
		if err != nil || len(batch) == 0 {
			return err
		}
	}
}

// Folding the counts.
//
// Each flush adds an entry for each record it counts, so a record
// replayed all day gathers thousands, and the store's size would grow with
// its replays rather than its records. Maintain (from the Store's sweep)
// folds them in one pass of an iterator, reading no record: once a record
// has gathered foldAt entries, those of one life (one token) are replaced
// by one holding their sum, and those of a life before the latest go. Entries written during the
// pass stay as they are, for the next.

// foldBatch bounds the entries one op of a fold deletes.
const foldBatch = 4096

// foldAt is how many entries a record gathers before a fold folds them:
// folding every record with two would rewrite most of a store replayed at
// random at every sweep, more writing than the entries it saves.
const foldAt = 4

// countsEntry is a counts entry read by a fold.
type countsEntry struct {
	key []byte
	val []byte
	exp uint64
}

// foldCounts folds the counts entries of every record.
func (b *Backend) foldCounts(ctx context.Context) error {
	var ops [][]countsEntry // the entries of each record to fold, in one op
	pending := 0
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		err := b.update(func(t *engine.Txn) error {
			f := b.nextFlush()
			for _, es := range ops {
				foldRecord(t, f, es)
			}
			return nil
		})
		ops, pending = ops[:0], 0
		return err
	}
	var id []byte // the record whose entries are being gathered
	var es []countsEntry
	err := b.eng.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixCounts}, PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); ; it.Next() {
			var k []byte
			if it.Valid() {
				k = it.Item().Key()
				if len(k) < 1+stampLen {
					continue // not an entry this release writes
				}
				if bytes.Equal(k[1:len(k)-stampLen], id) {
					e, err := readEntry(it.Item())
					if err != nil {
						return err
					}
					es = append(es, e)
					continue
				}
			}
			if len(es) >= foldAt {
				ops = append(ops, es)
				pending += len(es)
			}
			if !it.Valid() {
				return nil
			}
			if pending >= foldBatch {
				if err := ctx.Err(); err != nil {
					return err
				}
				if err := flush(); err != nil {
					return err
				}
			}
			e, err := readEntry(it.Item())
			if err != nil {
				return err
			}
			id, es = bytes.Clone(k[1:len(k)-stampLen]), []countsEntry{e}
		}
	})
	if err != nil {
		return err
	}
	return flush()
}

func readEntry(item *badger.Item) (countsEntry, error) {
	v, err := item.ValueCopy(nil)
	return countsEntry{key: item.KeyCopy(nil), val: v, exp: item.ExpiresAt()}, err
}

// foldRecord replaces es, the counts entries of one record in key order,
// in the op t: those of its latest token by one holding their sum, stamped
// with the flush number flush; those of earlier tokens by nothing.
func foldRecord(t *engine.Txn, flush uint64, es []countsEntry) {
	last := es[len(es)-1].key
	id := last[1 : len(last)-stampLen]
	token := binary.BigEndian.Uint64(last[len(last)-stampLen:])
	var sum backend.Tally
	var exp uint64
	for _, e := range es {
		t.Delete(e.key)
		if binary.BigEndian.Uint64(e.key[len(e.key)-stampLen:]) != token {
			continue // an earlier life's
		}
		if c, err := decodeCounts(e.val); err == nil {
			sum.Add(c)
		}
		exp = max(exp, e.exp)
	}
	t.Set(countsKey(id, token, flush), encodeCounts(sum), exp)
}

// countLedgerKey holds the Store's count ledger (backend.CountLedger), as
// the Store encodes it.
var countLedgerKey = []byte("s/countledger")

var _ backend.CountLedger = (*Backend)(nil)

// LoadCountLedger implements backend.CountLedger.
func (b *Backend) LoadCountLedger(ctx context.Context) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var v []byte
	err := b.eng.View(func(txn *badger.Txn) error {
		item, err := txn.Get(countLedgerKey)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		v, err = item.ValueCopy(nil)
		return err
	})
	if err != nil {
		return nil, backend.Unavailable("count ledger", err)
	}
	return v, nil
}

// SaveCountLedger implements backend.CountLedger. A read-only store keeps
// the ledger it has: its Store counts nothing it could lose.
func (b *Backend) SaveCountLedger(ctx context.Context, ledger []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if b.ro {
		return nil
	}
	v := bytes.Clone(ledger)
	if err := b.update(func(t *engine.Txn) error { t.Set(countLedgerKey, v, 0); return nil }); err != nil {
		return backend.Unavailable("count ledger", err)
	}
	return nil
}
