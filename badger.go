package idem

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
)

// Durability says when a write counts as done.
type Durability uint8

const (
	// Durable, the default, syncs every commit to the disk before it is
	// acknowledged: a claim is durable before its effect runs and a result
	// before the caller is answered, even across a power loss.
	Durable Durability = iota
	// Fast acknowledges a commit once it is in the operating system's page
	// cache. It survives a crash of the process but not of the machine: a
	// power loss can forget claims and results, and so let an effect run
	// twice. Use it only where that is acceptable.
	Fast
)

// String returns "durable" or "fast".
func (d Durability) String() string {
	if d == Fast {
		return "fast"
	}
	return "durable"
}

// BadgerOptions tune the embedded Badger backend. The zero value is sized
// for a library embedded in a larger program: small memtables and caches,
// an empty store costs a few MiB of heap rather than Badger's ~90 MiB.
type BadgerOptions struct {
	// InMemory keeps everything in memory (for tests); the directory is
	// ignored and nothing survives Close.
	InMemory bool
	// Durability is Durable unless set to Fast.
	Durability Durability
	// ReadOnly opens an existing store without writing to it (inspection
	// while no process holds the directory). Write calls fail.
	ReadOnly bool
	// MemTableSize is the size of one memtable; 0 means 4 MiB.
	MemTableSize int64
	// BlockCacheSize is the size of the block cache; 0 means 4 MiB.
	BlockCacheSize int64
	// ValueThreshold is the size above which a record is kept in the value
	// log rather than the LSM tree; 0 means 16 KiB.
	ValueThreshold int64
	// Logger receives Badger's warnings and errors; nil discards them.
	Logger *slog.Logger
	// Tune, if set, may change any Badger option last. Changing
	// DetectConflicts, or SyncWrites under Durable, breaks the contract.
	Tune func(*badger.Options)
}

// Key prefixes in the Badger keyspace. A record's id is its scope's length
// (one byte; scopes are at most 255 bytes), the scope, then the key, so no
// two (scope, key) pairs share an id.
const (
	prefixRecord = 'r' // r + id -> msgpack Record
	prefixClaim  = 'c' // c + id -> empty: an open claim, read once on open
	prefixExpiry = 'x' // x + big-endian unix nanos + id -> empty
)

// reclaimGrace is added to Badger's own TTL on records. Badger's TTL has a
// one-second resolution on the wall clock, so it never decides expiry: the
// store does with its clock. The TTL only lets compaction drop what the
// reclaim sweep missed, well after the store stopped replaying it.
const reclaimGrace = time.Hour

// BadgerBackend is the embedded default Backend, storing records in a
// Badger directory. One process holds a directory at a time, which lets the
// backend keep the open claims in memory and know, on open, that every
// claim a previous process left is orphaned.
type BadgerBackend struct {
	db *badger.DB
	ro bool

	// ops feeds the committer (commit.go), the only writer; stopped is
	// closed by Close, and committerDone when the committer returned.
	ops           chan op
	stopped       chan struct{}
	committerDone chan struct{}

	// lastToken is the highest fencing token handed out. Only the
	// committer reads or writes it, and it persists it with the claims.
	lastToken uint64

	// hot holds recent done records for replays (hot.go).
	hot hotSet

	// mu guards open and cursor.
	mu sync.Mutex
	// open holds every in-progress claim: Stale scans it instead of the
	// records, so a sweep costs in proportion to open claims. Entries are
	// written by the committer after the commit that they mirror.
	open map[string]openClaim
	// cursor is the last expiry index key Reclaim processed, so the next
	// scan seeks past the tombstones it left.
	cursor []byte

	gcMu sync.Mutex // serialises value-log garbage collection
}

type openClaim struct {
	leaseEnds, nextCheck time.Time
	attention            bool
}

var _ Backend = (*BadgerBackend)(nil)
var _ Lister = (*BadgerBackend)(nil)

// OpenBadger opens or creates a Badger backend in dir. Claims left open by
// a previous process are orphaned: their lease is ended at once, so that
// recovery resolves them.
func OpenBadger(dir string, o BadgerOptions) (*BadgerBackend, error) {
	bo := badger.DefaultOptions(dir)
	if o.InMemory {
		bo = badger.DefaultOptions("").WithInMemory(true)
	}
	memtable := o.MemTableSize
	if memtable <= 0 {
		memtable = 4 << 20
	}
	cache := o.BlockCacheSize
	if cache <= 0 {
		cache = 4 << 20
	}
	threshold := o.ValueThreshold
	if threshold <= 0 {
		threshold = 16 << 10
	}
	bo = bo.
		WithSyncWrites(o.Durability == Durable && !o.InMemory).
		WithReadOnly(o.ReadOnly).
		WithMemTableSize(memtable).
		WithNumMemtables(3).
		WithBlockCacheSize(cache).
		WithIndexCacheSize(2 << 20).
		WithValueThreshold(threshold).
		WithValueLogFileSize(64 << 20).
		WithNumCompactors(2).
		WithNumLevelZeroTables(4).
		WithNumLevelZeroTablesStall(12).
		WithMetricsEnabled(false).
		WithDetectConflicts(true).
		WithLogger(badgerLogger{o.Logger})
	// Badger reads its tables through mmap, and the kernel maps 64 KiB of
	// page cache around every page a read touches: after a few thousand
	// reads of random keys, the table files are resident in the process
	// almost whole. So the resident memory of a store with many keys is
	// about the size of its tables, and what shrinks them shrinks it.
	// zstd on 16 KiB blocks holds the records in ~60% of the bytes Snappy
	// on 4 KiB blocks does (1M records: 128 MiB of tables instead of 217;
	// the block index shrinks 3x too), for 10-15% more CPU in a bulk load
	// (compaction compresses; reads of cold keys decompress more). Each
	// table records its compression, so stores written before still read;
	// they are rewritten with zstd as compaction reaches them.
	bo = bo.
		WithCompression(options.ZSTD).
		WithZSTDCompressionLevel(1).
		WithBlockSize(16 << 10)
	// A compaction builds up to 13 tables at once per compactor, each held
	// in memory uncompressed and compressed until written. With Badger's
	// tables doubling per level (8 MiB at the bottom for 1M records), a
	// process loading 1M keys peaked at 1.5 GB resident; with tables of
	// 1 MiB at every level (a builder holds ~5 MiB) and zstd, at 0.8 GB.
	bo = bo.WithBaseTableSize(1 << 20)
	bo.TableSizeMultiplier = 1
	if o.Tune != nil {
		o.Tune(&bo)
	}
	if !o.InMemory && !o.ReadOnly {
		if err := removeEmptyLogs(dir); err != nil {
			return nil, fmt.Errorf("%w: open badger at %q: %v", ErrUnavailable, dir, err)
		}
	}
	db, err := badger.Open(bo)
	if err != nil {
		return nil, fmt.Errorf("%w: open badger at %q: %w", ErrUnavailable, dir, err)
	}
	b := &BadgerBackend{db: db, ro: o.ReadOnly, open: map[string]openClaim{},
		ops: make(chan op, maxGroup), stopped: make(chan struct{}), committerDone: make(chan struct{})}
	if o.ReadOnly {
		close(b.committerDone)
		return b, nil
	}
	err = db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(tokenKey)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return item.Value(func(v []byte) error {
			if len(v) != 8 {
				return fmt.Errorf("%w: token counter of %d bytes", ErrCorrupt, len(v))
			}
			b.lastToken = binary.BigEndian.Uint64(v)
			return nil
		})
	})
	go b.committer()
	if err == nil {
		err = b.orphanOpenClaims()
	}
	if err != nil {
		_ = b.Close()
		return nil, unavailable("open", err)
	}
	return b, nil
}

// removeEmptyLogs deletes zero-byte value-log and memtable files. A process
// killed while Badger opens can leave such a file behind (every open
// creates a new one), and Badger v4.9.6 then refuses to open the directory
// once ("Create a new file"; upstream issue 2207). An empty file holds no
// data, so removing it loses nothing.
func removeEmptyLogs(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !(strings.HasSuffix(name, ".vlog") || strings.HasSuffix(name, ".mem")) {
			continue
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		if info.Size() == 0 {
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				return err
			}
		}
	}
	return nil
}

// tokenKey holds the highest fencing token handed out, big-endian.
var tokenKey = []byte("s/token")

// nextToken hands out a token and writes the counter with the claim that
// holds it. It runs on the committer only.
func (b *BadgerBackend) nextToken(w *wtxn) (uint64, error) {
	b.lastToken++
	var v [8]byte
	binary.BigEndian.PutUint64(v[:], b.lastToken)
	return b.lastToken, w.Set(tokenKey, v[:])
}

// DB returns the underlying Badger database, for inspection and tools.
func (b *BadgerBackend) DB() *badger.DB { return b.db }

// orphanOpenClaims ends the lease of every claim left by an earlier
// process: the directory lock means no live process holds them. It walks
// the claim index, whose size is the number of open claims (plus
// tombstones not yet compacted), never the records.
func (b *BadgerBackend) orphanOpenClaims() error {
	var ids [][]byte
	err := b.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixClaim}})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			ids = append(ids, bytes.Clone(it.Item().Key()[1:]))
		}
		return nil
	})
	if err != nil {
		return err
	}
	// A few ops for all of them: one commit per thousand claims, not one per
	// claim.
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), 1000)]
		ids = ids[len(chunk):]
		if err := b.orphan(chunk); err != nil {
			return err
		}
	}
	return nil
}

// orphan ends the lease of each open claim in ids, in one op.
func (b *BadgerBackend) orphan(ids [][]byte) error {
	return b.batch(func(w *wtxn) error {
		for _, id := range ids {
			rec, err := getRecord(w, id)
			if err != nil {
				return err
			}
			if rec == nil || rec.State != StateInProgress {
				if err := w.Delete(withPrefix(prefixClaim, id)); err != nil {
					return err
				}
				continue
			}
			rec.LeaseEnds = time.Time{}
			rec.Owner = ""
			rec.NoteAttempt(rec.Token, "orphaned by a restart")
			if err := b.put(w, id, rec, time.Time{}); err != nil {
				return err
			}
			w.onCommit(func() { b.setOpen(id, rec) })
		}
		return nil
	})
}

func recordID(scope, key string) []byte {
	id := make([]byte, 0, 1+len(scope)+len(key))
	id = append(id, byte(len(scope)))
	id = append(id, scope...)
	return append(id, key...)
}

func withPrefix(p byte, id []byte) []byte {
	k := make([]byte, 0, 1+len(id))
	k = append(k, p)
	return append(k, id...)
}

func expiryKey(at time.Time, id []byte) []byte {
	k := make([]byte, 9, 9+len(id))
	k[0] = prefixExpiry
	binary.BigEndian.PutUint64(k[1:], uint64(at.UnixNano()))
	return append(k, id...)
}

// update runs fn on the current record of id (nil if absent) as one op of
// the committer's next group. fn may return errNoWrite to end without
// writing.
func (b *BadgerBackend) update(id []byte, fn func(w *wtxn, rec *Record) error) error {
	return b.batch(func(w *wtxn) error {
		rec, err := getRecord(w, id)
		if err != nil {
			return err
		}
		return fn(w, rec)
	})
}

var errNoWrite = errors.New("no write")

// getter reads keys: a transaction, or an op's view of its group.
type getter interface {
	Get(key []byte) (*badger.Item, error)
}

func getRecord(txn getter, id []byte) (*Record, error) {
	item, err := txn.Get(withPrefix(prefixRecord, id))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var rec *Record
	err = item.Value(func(v []byte) error {
		var derr error
		rec, derr = UnmarshalRecord(v)
		return derr
	})
	return rec, err
}

// put writes rec; ttlFrom, if not zero, is the store's time used to set
// Badger's TTL relative to the record's expiry.
func (b *BadgerBackend) put(txn *wtxn, id []byte, rec *Record, ttlFrom time.Time) error {
	v, err := MarshalRecord(rec)
	if err != nil {
		return err
	}
	e := badger.NewEntry(withPrefix(prefixRecord, id), v)
	if !ttlFrom.IsZero() && !rec.ExpiresAt.IsZero() {
		e = e.WithTTL(max(rec.ExpiresAt.Sub(ttlFrom), 0) + reclaimGrace)
	}
	return txn.SetEntry(e)
}

func (b *BadgerBackend) setOpen(id []byte, rec *Record) {
	b.mu.Lock()
	if rec.State == StateInProgress {
		b.open[string(id)] = openClaim{leaseEnds: rec.LeaseEnds, nextCheck: rec.NextCheck, attention: rec.Attention}
	} else {
		delete(b.open, string(id))
	}
	b.mu.Unlock()
}

// Claim implements Backend.
func (b *BadgerBackend) Claim(ctx context.Context, scope, key string, args ClaimArgs) (*Record, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	id := recordID(scope, key)
	// Fast path, off the committer: a done record that has not expired, or
	// a claim in progress, is answered from a read. Neither can become
	// claimable by any write but the committer's own later ones, so the
	// answer is the one the committer would give at this instant.
	if rec, err := b.peek(id); err != nil {
		return nil, false, unavailable("claim", err)
	} else if rec != nil && (rec.State == StateInProgress || (rec.State == StateDone && !rec.Expired(args.Now))) {
		return rec.Clone(), false, nil
	}
	var out *Record
	var claimed bool
	err := b.update(id, func(txn *wtxn, rec *Record) error {
		claimed = false
		if rec != nil && rec.State != StateReleased && !rec.Expired(args.Now) {
			out = rec
			return errNoWrite
		}
		token, err := b.nextToken(txn)
		if err != nil {
			return err
		}
		n := &Record{
			Scope: scope, Key: key, State: StateInProgress,
			Fingerprint: args.Fingerprint, Token: token,
			LeaseEnds: args.LeaseEnds, Retention: args.Retention,
			FirstSeen: args.Now, ClaimedAt: args.Now, Claims: 1, Owner: args.Owner,
		}
		if rec != nil {
			// An expired record starts a new life; a released one goes on.
			if rec.State == StateReleased {
				n.FirstSeen = rec.FirstSeen
				n.Claims = rec.Claims + 1
				n.Attempts = rec.Attempts
				n.Replays, n.LastReplay = rec.Replays, rec.LastReplay
				n.Conflicts, n.Mismatches, n.LastRejection = rec.Conflicts, rec.Mismatches, rec.LastRejection
			}
			if !rec.ExpiresAt.IsZero() {
				if err := txn.Delete(expiryKey(rec.ExpiresAt, id)); err != nil {
					return err
				}
			}
			txn.onCommit(func() { b.hot.drop(id) })
		}
		n.AddAttempt(Attempt{Token: token, ClaimedAt: args.Now, Owner: args.Owner})
		if err := txn.Set(withPrefix(prefixClaim, id), nil); err != nil {
			return err
		}
		if err := b.put(txn, id, n, time.Time{}); err != nil {
			return err
		}
		out, claimed = n, true
		txn.onCommit(func() { b.setOpen(id, n) })
		return nil
	})
	if err != nil {
		return nil, false, unavailable("claim", err)
	}
	return out.Clone(), claimed, nil
}

// fenced runs fn on the record of (scope, key) if it is in progress with
// token, writes the record fn leaves, and mirrors it in the open claims.
func (b *BadgerBackend) fenced(ctx context.Context, op, scope, key string, token uint64, ttlFrom time.Time,
	fn func(txn *wtxn, id []byte, rec *Record) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	id := recordID(scope, key)
	err := b.update(id, func(txn *wtxn, rec *Record) error {
		if rec == nil || rec.State != StateInProgress || rec.Token != token {
			return &FencedError{Scope: scope, Key: key, Token: token}
		}
		if err := fn(txn, id, rec); err != nil {
			return err
		}
		if err := b.put(txn, id, rec, ttlFrom); err != nil {
			return err
		}
		txn.onCommit(func() { b.setOpen(id, rec) })
		return nil
	})
	if err != nil {
		return unavailable(op, err)
	}
	return nil
}

// Complete implements Backend.
func (b *BadgerBackend) Complete(ctx context.Context, scope, key string, token uint64, c Completion) error {
	return b.fenced(ctx, "complete", scope, key, token, c.At, func(txn *wtxn, id []byte, rec *Record) error {
		res := c.Result
		rec.State, rec.Result = StateDone, &res
		rec.DoneAt, rec.ExpiresAt, rec.Recovered = c.At, c.ExpiresAt, c.Recovered
		outcome := "completed"
		if c.Recovered != "" {
			outcome = "recovered: " + c.Recovered
		}
		rec.EndAttempt(token, c.At, outcome, "", c.Result.Status)
		done := rec.Clone()
		txn.onCommit(func() { b.hot.put(id, done) })
		rec.Checks, rec.NextCheck, rec.Attention, rec.Owner = 0, time.Time{}, false, ""
		if err := txn.Delete(withPrefix(prefixClaim, id)); err != nil {
			return err
		}
		return txn.SetEntry(badger.NewEntry(expiryKey(c.ExpiresAt, id), nil).
			WithTTL(max(c.ExpiresAt.Sub(c.At), 0) + reclaimGrace))
	})
}

// Release implements Backend.
func (b *BadgerBackend) Release(ctx context.Context, scope, key string, token uint64, r Releasing) error {
	return b.fenced(ctx, "release", scope, key, token, r.At, func(txn *wtxn, id []byte, rec *Record) error {
		rec.State, rec.ExpiresAt, rec.Recovered = StateReleased, r.ExpiresAt, r.Reason
		rec.EndAttempt(token, r.At, "released", r.Reason, 0)
		rec.Checks, rec.NextCheck, rec.Attention, rec.Owner = 0, time.Time{}, false, ""
		rec.DoneAt = r.At
		if err := txn.Delete(withPrefix(prefixClaim, id)); err != nil {
			return err
		}
		return txn.SetEntry(badger.NewEntry(expiryKey(r.ExpiresAt, id), nil).
			WithTTL(max(r.ExpiresAt.Sub(r.At), 0) + reclaimGrace))
	})
}

// Extend implements Backend.
func (b *BadgerBackend) Extend(ctx context.Context, scope, key string, token uint64, leaseEnds time.Time) error {
	return b.fenced(ctx, "extend", scope, key, token, time.Time{}, func(_ *wtxn, _ []byte, rec *Record) error {
		rec.LeaseEnds = leaseEnds
		return nil
	})
}

// Defer implements Backend.
func (b *BadgerBackend) Defer(ctx context.Context, scope, key string, token uint64, d Deferral) error {
	return b.fenced(ctx, "defer", scope, key, token, time.Time{}, func(_ *wtxn, _ []byte, rec *Record) error {
		rec.Checks, rec.NextCheck, rec.Attention = d.Checks, d.NextCheck, d.Attention
		return nil
	})
}

// peek reads the record of id outside the committer: from the hot set, or
// from a read transaction (caching what it finds done).
func (b *BadgerBackend) peek(id []byte) (*Record, error) {
	if rec := b.hot.get(id); rec != nil {
		return rec, nil
	}
	var rec *Record
	err := b.db.View(func(txn *badger.Txn) error {
		var err error
		rec, err = getRecord(txn, id)
		return err
	})
	if err == nil && rec != nil && rec.State == StateDone && !b.ro {
		b.hot.put(id, rec)
	}
	return rec, err
}

// Get implements Backend.
func (b *BadgerBackend) Get(ctx context.Context, scope, key string) (*Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var rec *Record
	err := b.db.View(func(txn *badger.Txn) error {
		var err error
		rec, err = getRecord(txn, recordID(scope, key))
		return err
	})
	if err != nil {
		return nil, unavailable("get", err)
	}
	if rec == nil {
		return nil, ErrNotFound
	}
	return rec, nil
}

// Stale implements Backend. It reads the in-memory set of open claims, so
// its cost does not grow with the number of done records.
func (b *BadgerBackend) Stale(ctx context.Context, now time.Time, limit int) ([]*Record, error) {
	type due struct {
		id        string
		leaseEnds time.Time
	}
	var ids []due
	b.mu.Lock()
	for id, c := range b.open {
		if !c.attention && !now.Before(c.leaseEnds) && !now.Before(c.nextCheck) {
			ids = append(ids, due{id, c.leaseEnds})
		}
	}
	b.mu.Unlock()
	sort.Slice(ids, func(i, j int) bool { return ids[i].leaseEnds.Before(ids[j].leaseEnds) })
	var out []*Record
	err := b.db.View(func(txn *badger.Txn) error {
		for _, d := range ids {
			if len(out) >= limit {
				break
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			rec, err := getRecord(txn, []byte(d.id))
			if err != nil {
				return err
			}
			if rec != nil && rec.Stale(now) && !now.Before(rec.NextCheck) && !rec.Attention {
				out = append(out, rec)
			}
		}
		return nil
	})
	if err != nil {
		return nil, unavailable("stale", err)
	}
	return out, nil
}

// Reclaim implements Backend. It walks the expiry index from where the last
// call stopped, so the tombstones of what it already deleted are sought
// past rather than read again.
func (b *BadgerBackend) Reclaim(ctx context.Context, now time.Time, limit int) ([]Ref, error) {
	if b.ro {
		return nil, fmt.Errorf("%w: store opened read-only", ErrUnavailable)
	}
	var refs []Ref
	for len(refs) < limit {
		if err := ctx.Err(); err != nil {
			return refs, err
		}
		due, err := b.dueExpiries(now, limit-len(refs))
		if err != nil {
			return refs, unavailable("reclaim", err)
		}
		if len(due) == 0 {
			break
		}
		var got []Ref
		err = b.batch(func(w *wtxn) error {
			got = got[:0]
			for _, e := range due {
				rec, err := getRecord(w, e.id)
				// A corrupt record is left for an operator to inspect; its
				// index entry goes, so that it cannot stall reclamation.
				if err != nil && !errors.Is(err, ErrCorrupt) {
					return err
				}
				if err := w.Delete(e.key); err != nil {
					return err
				}
				// The index entry may outlive its record's life: the key may
				// have been claimed again since. Delete only what is still
				// expired.
				if rec != nil && rec.State != StateInProgress && rec.ExpiresAt.UnixNano() == e.at && !now.Before(rec.ExpiresAt) {
					got = append(got, Ref{Scope: rec.Scope, Key: rec.Key, Token: rec.Token})
					if err := w.Delete(withPrefix(prefixRecord, e.id)); err != nil {
						return err
					}
					w.onCommit(func() { b.hot.drop(e.id) })
				}
			}
			last := due[len(due)-1].key
			w.onCommit(func() {
				b.mu.Lock()
				if bytes.Compare(last, b.cursor) > 0 {
					b.cursor = last
				}
				b.mu.Unlock()
			})
			return nil
		})
		if err != nil {
			return refs, unavailable("reclaim", err)
		}
		refs = append(refs, got...)
		if len(due) < limit-len(refs)+len(got) {
			break // the index holds nothing more that is due
		}
	}
	return refs, nil
}

type expiryEntry struct {
	at  int64
	id  []byte
	key []byte
}

// dueExpiries reads up to limit expiry index entries due at now, from the
// cursor on.
func (b *BadgerBackend) dueExpiries(now time.Time, limit int) ([]expiryEntry, error) {
	b.mu.Lock()
	// Seek just past the last key processed: a zero byte appended is the
	// next possible key.
	start := append(bytes.Clone(b.cursor), 0)
	b.mu.Unlock()
	if len(start) == 1 {
		start = []byte{prefixExpiry}
	}
	var due []expiryEntry
	err := b.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixExpiry}})
		defer it.Close()
		for it.Seek(start); it.Valid() && len(due) < limit; it.Next() {
			k := it.Item().Key()
			at := int64(binary.BigEndian.Uint64(k[1:9]))
			if at > now.UnixNano() {
				break
			}
			due = append(due, expiryEntry{at, bytes.Clone(k[9:]), bytes.Clone(k)})
		}
		return nil
	})
	return due, err
}

// AddTallies implements Tallier: the counts of many records in one op.
func (b *BadgerBackend) AddTallies(ctx context.Context, tallies []Tally) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return unavailable("tally", b.batch(func(w *wtxn) error {
		for _, t := range tallies {
			id := recordID(t.Scope, t.Key)
			rec, err := getRecord(w, id)
			if errors.Is(err, ErrCorrupt) || (err == nil && rec == nil) {
				continue // reclaimed since, or left for an operator
			}
			if err != nil {
				return err
			}
			rec.Apply(t)
			if err := b.put(w, id, rec, latest(t.LastReplay, t.LastRejection)); err != nil {
				return err
			}
			// Keep a replayed record hot: dropping it would send the next
			// replay of every counted key to the LSM tree.
			if rec.State == StateDone {
				kept := rec.Clone()
				w.onCommit(func() { b.hot.put(id, kept) })
			} else {
				w.onCommit(func() { b.hot.drop(id) })
			}
		}
		return nil
	}))
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Maintain runs Badger's value-log garbage collection once, so that space
// freed by reclaimed records returns to the disk over time. The store calls
// it from its background sweep.
func (b *BadgerBackend) Maintain(ctx context.Context) error {
	if b.ro || b.db.Opts().InMemory || !b.gcMu.TryLock() {
		return nil
	}
	defer b.gcMu.Unlock()
	for i := 0; i < 4 && ctx.Err() == nil; i++ {
		if err := b.db.RunValueLogGC(0.5); err != nil {
			if errors.Is(err, badger.ErrNoRewrite) || errors.Is(err, badger.ErrRejected) {
				return nil
			}
			return unavailable("maintain", err)
		}
	}
	return nil
}

// Scan implements Lister.
func (b *BadgerBackend) Scan(ctx context.Context, fn func(*Record) bool) error {
	err := b.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixRecord}, PrefetchValues: true, PrefetchSize: 64})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			if err := ctx.Err(); err != nil {
				return err
			}
			var rec *Record
			if err := it.Item().Value(func(v []byte) error {
				var err error
				rec, err = UnmarshalRecord(v)
				return err
			}); err != nil {
				return err
			}
			if !fn(rec) {
				return nil
			}
		}
		return nil
	})
	return unavailable("scan", err)
}

// Close implements Backend.
func (b *BadgerBackend) Close() error {
	select {
	case <-b.stopped:
	default:
		close(b.stopped)
	}
	<-b.committerDone
	return b.db.Close()
}

// badgerLogger hands Badger's warnings and errors to slog and drops its
// chatty info and debug lines.
type badgerLogger struct{ l *slog.Logger }

func (g badgerLogger) Errorf(f string, a ...any) {
	if g.l != nil {
		g.l.Error("badger: " + fmt.Sprintf(f, a...))
	}
}
func (g badgerLogger) Warningf(f string, a ...any) {
	if g.l != nil {
		g.l.Warn("badger: " + fmt.Sprintf(f, a...))
	}
}
func (g badgerLogger) Infof(string, ...any)  {}
func (g badgerLogger) Debugf(string, ...any) {}
