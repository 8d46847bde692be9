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
	"sync/atomic"
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
	// Durability is Durable unless set to Fast. It is for OpenBadger:
	// Open sets it from Options.Durability and refuses another value here.
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
	// DetectConflicts breaks the contract. SyncWrites is off: under
	// Durable, the backend syncs a log of its own before each commit.
	Tune func(*badger.Options)
}

// Key prefixes in the Badger keyspace. A record's id is its scope's length
// (one byte; scopes are at most 255 bytes), the scope, then the key, so no
// two (scope, key) pairs share an id.
const (
	prefixRecord = 'r' // r + id -> msgpack Record
	prefixClaim  = 'c' // c + id -> empty: an open claim, read once on open
	prefixExpiry = 'x' // x + big-endian unix nanos + id -> empty
	prefixCounts = 't' // t + id -> counts added to a done or released record (AddTallies)
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
	db  *badger.DB
	ro  bool
	dir string

	// wal is the log of a Durable store (wal.go), nil otherwise; it belongs
	// to the syncer while the committer runs.
	wal *wal
	// broken, once set, stops all writing until a reopen (commit.go).
	brokenMu sync.Mutex
	broken   error

	// The committer's pipeline (commit.go): writes of the units handed
	// on and not yet in Badger, by key, and the order to retire them in;
	// seq numbers units; retired is the last unit the applier finished
	// (every unit up to it is in Badger, or wrote nothing).
	// durable is the last unit synced to the log (Durable only). The
	// committer writes the overlay under overlayMu; readers outside it
	// take overlayMu to find writes that are durable but not yet in
	// Badger.
	overlay   map[string]overlayEntry
	overlayMu sync.RWMutex
	sealed    []sealedKey
	seq       uint64
	retired   atomic.Uint64
	durable   atomic.Uint64
	// settleMu and settleCond let scans wait for Badger to hold every
	// answered write (settle).
	settleMu   sync.Mutex
	settleCond *sync.Cond

	// ops feeds the committer (commit.go), the only writer; stopped is
	// closed by Close, and committerDone when the committer returned.
	ops           chan op
	stopped       chan struct{}
	committerDone chan struct{}
	// testLog and testApply, when set by a test, run on the syncer
	// before it logs a unit and on the applier before it commits one.
	testLog, testApply func(seq uint64)

	// lastToken is the highest fencing token handed out. Only the
	// committer reads or writes it, and it persists it with the claims.
	lastToken uint64

	// mu guards open and cursor.
	mu sync.Mutex
	// open holds every in-progress claim, with its record as stored:
	// Stale scans it instead of the records, and the committer reads an
	// open claim's record from it rather than from Badger, so a sweep
	// costs in proportion to open claims, whatever the records. Entries
	// are written by the syncer once the commit they mirror is durable,
	// before the applier may commit it to Badger (commit.go).
	open map[string]openClaim
	// cursor is the last expiry index key Reclaim processed, so the next
	// scan seeks past the tombstones it left.
	cursor []byte

	gcMu sync.Mutex // serialises value-log garbage collection

	closeOnce sync.Once
	closeErr  error

	// tallyMu serialises AddTallies calls, so that no two of their ops
	// share a group: an op is then the only reader of what it put in
	// tallied before its writes were stored.
	tallyMu sync.Mutex
	// cacheMu guards tallied: for records whose counts are kept beside
	// them, their Badger expiry and the counts stored, so that a flush
	// writes new counts without reading either. A write or a deletion of
	// a record drops its entry at once, in its op; an AddTallies op sets
	// entries as it writes, and AddTallies clears the map if an op failed.
	cacheMu sync.Mutex
	tallied map[string]talliedRecord
}

// talliedRecord is what the store holds of a record whose counts are kept
// beside it.
type talliedRecord struct {
	expiresAt uint64 // the record's Badger expiry, which its counts share
	counts    Tally  // the counts beside it
}

type openClaim struct {
	leaseEnds, nextCheck time.Time
	attention            bool
	val                  []byte // the record, encoded; never changed
}

var _ Backend = (*BadgerBackend)(nil)
var _ Lister = (*BadgerBackend)(nil)
var _ Maintainer = (*BadgerBackend)(nil)

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
		WithSyncWrites(false). // Durable syncs idem's own log (wal.go)
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
	b := &BadgerBackend{db: db, ro: o.ReadOnly, dir: dir, open: map[string]openClaim{},
		ops: make(chan op, maxGroup), stopped: make(chan struct{}), committerDone: make(chan struct{})}
	b.settleCond = sync.NewCond(&b.settleMu)
	if o.ReadOnly {
		close(b.committerDone)
		if !o.InMemory {
			n, err := pendingWAL(dir)
			if err == nil && n > 0 {
				err = fmt.Errorf("%w: its log holds %d groups of writes not yet applied", ErrUnclean, n)
			}
			if err != nil {
				_ = db.Close()
				return nil, fmt.Errorf("%w: open badger at %q: %w", ErrUnavailable, dir, err)
			}
		}
		return b, nil
	}
	if !o.InMemory {
		if err := b.openLog(o.Durability == Durable); err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("%w: open badger at %q: log: %w", ErrUnavailable, dir, err)
		}
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

// openLog replays what the log holds beyond Badger's last checkpoint and
// keeps the log open if durable. A Fast store replays a log a Durable one
// left (or its stale frames would be replayed over newer writes by the
// next Durable open) and then writes none.
func (b *BadgerBackend) openLog(durable bool) error {
	if !durable {
		if _, err := os.Stat(filepath.Join(b.dir, walName)); errors.Is(err, fs.ErrNotExist) {
			return nil
		}
	}
	w, frames, err := openWAL(b.dir)
	if err != nil {
		return err
	}
	b.wal = w
	if len(frames) > 0 {
		if err := applyFrames(b.db, frames); err != nil {
			_ = w.close()
			b.wal = nil
			return fmt.Errorf("replay: %w", err)
		}
		if err := b.checkpoint(); err != nil {
			_ = w.close()
			b.wal = nil
			return fmt.Errorf("checkpoint after replay: %w", err)
		}
	}
	if !durable {
		b.wal = nil
		return w.close()
	}
	return nil
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
// Under Durable, a write is answered once the store's log is synced, and
// Badger holds it a moment later: a read through DB may miss the writes
// answered last. Scan waits for them.
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
			rec, err := w.record(id)
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
			rec.noteAttempt(rec.Token, "orphaned by a restart")
			v, err := b.put(w, id, rec, time.Time{})
			if err != nil {
				return err
			}
			w.onCommit(func() { b.setOpen(id, rec, v) })
		}
		return nil
	})
}

func recordID(scope, key string) []byte {
	return appendRecordID(make([]byte, 0, 1+len(scope)+len(key)), scope, key)
}

// appendRecordID appends the id of (scope, key) to dst. The scope must be
// at most 255 bytes.
func appendRecordID(dst []byte, scope, key string) []byte {
	dst = append(dst, byte(len(scope)))
	dst = append(dst, scope...)
	return append(dst, key...)
}

// splitRecordID returns the scope and key of a record id.
func splitRecordID(id []byte) (scope, key string) {
	if len(id) == 0 || 1+int(id[0]) > len(id) {
		return "", string(id) // not an id: names no record
	}
	n := 1 + int(id[0])
	return string(id[1:n]), string(id[n:])
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
		rec, err := w.record(id)
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
// Badger's TTL relative to the record's expiry. It returns the encoded
// record, which nothing may change.
func (b *BadgerBackend) put(txn *wtxn, id []byte, rec *Record, ttlFrom time.Time) ([]byte, error) {
	v, err := MarshalRecord(rec)
	if err != nil {
		return nil, err
	}
	b.forgetTallied(id)
	if !ttlFrom.IsZero() && !rec.ExpiresAt.IsZero() {
		return v, txn.SetTTL(withPrefix(prefixRecord, id), v, max(rec.ExpiresAt.Sub(ttlFrom), 0)+reclaimGrace)
	}
	return v, txn.Set(withPrefix(prefixRecord, id), v)
}

// setOpen mirrors in the open claims the record rec of id, stored as v,
// once the write is durable: as an open claim if it is in progress, else
// by forgetting it.
func (b *BadgerBackend) setOpen(id []byte, rec *Record, v []byte) {
	b.mu.Lock()
	if rec.State == StateInProgress {
		b.open[string(id)] = openClaim{leaseEnds: rec.LeaseEnds, nextCheck: rec.NextCheck, attention: rec.Attention, val: v}
	} else {
		delete(b.open, string(id))
	}
	b.mu.Unlock()
}

// reopen replaces the stored record of id, if it is an open claim, by v,
// which changed only its counts.
func (b *BadgerBackend) reopen(id []byte, v []byte) {
	b.mu.Lock()
	if c, ok := b.open[string(id)]; ok {
		c.val = v
		b.open[string(id)] = c
	}
	b.mu.Unlock()
}

// openRecord returns the stored record of id if it is an open claim, as
// of the last durable write.
func (b *BadgerBackend) openRecord(id []byte) []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.open[string(id)].val
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
	if rec, err := b.peek(scope, key, id); err != nil {
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
			// Either way the counts kept beside the record go: into the new
			// record if its life goes on (they must not expire with the
			// released record), nowhere if it starts afresh.
			if rec.State == StateReleased {
				t, err := txn.counts(id)
				if err != nil {
					return err
				}
				rec.apply(t)
				n.FirstSeen = rec.FirstSeen
				n.Claims = rec.Claims + 1
				n.Attempts = rec.Attempts
				n.Replays, n.LastReplay = rec.Replays, rec.LastReplay
				n.Conflicts, n.Mismatches, n.LastRejection = rec.Conflicts, rec.Mismatches, rec.LastRejection
			}
			if err := txn.Delete(withPrefix(prefixCounts, id)); err != nil {
				return err
			}
			if !rec.ExpiresAt.IsZero() {
				if err := txn.Delete(expiryKey(rec.ExpiresAt, id)); err != nil {
					return err
				}
			}
		}
		n.addAttempt(Attempt{Token: token, ClaimedAt: args.Now, Owner: args.Owner})
		if err := txn.Set(withPrefix(prefixClaim, id), nil); err != nil {
			return err
		}
		v, err := b.put(txn, id, n, time.Time{})
		if err != nil {
			return err
		}
		out, claimed = n, true
		txn.onCommit(func() { b.setOpen(id, n, v) })
		return nil
	})
	if err != nil {
		return nil, false, unavailable("claim", err)
	}
	// out was decoded or built by this op and is referenced by nothing
	// else once the op is answered (its onCommit hooks have run): the
	// caller may have it.
	return out, claimed, nil
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
		v, err := b.put(txn, id, rec, ttlFrom)
		if err != nil {
			return err
		}
		txn.onCommit(func() { b.setOpen(id, rec, v) })
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
		rec.State, rec.Result = StateDone, c.Result.clone()
		rec.DoneAt, rec.ExpiresAt, rec.Recovered = c.At, c.ExpiresAt, c.Recovered
		rec.endAttempt(token, c.Ending)
		rec.Checks, rec.NextCheck, rec.Attention, rec.Owner = 0, time.Time{}, false, ""
		if err := txn.Delete(withPrefix(prefixClaim, id)); err != nil {
			return err
		}
		return txn.SetTTL(expiryKey(c.ExpiresAt, id), nil, max(c.ExpiresAt.Sub(c.At), 0)+reclaimGrace)
	})
}

// Release implements Backend.
func (b *BadgerBackend) Release(ctx context.Context, scope, key string, token uint64, r Releasing) error {
	return b.fenced(ctx, "release", scope, key, token, r.At, func(txn *wtxn, id []byte, rec *Record) error {
		rec.State, rec.ExpiresAt, rec.Recovered = StateReleased, r.ExpiresAt, r.Reason
		rec.endAttempt(token, r.Ending)
		rec.Checks, rec.NextCheck, rec.Attention, rec.Owner = 0, time.Time{}, false, ""
		rec.DoneAt = r.At
		if err := txn.Delete(withPrefix(prefixClaim, id)); err != nil {
			return err
		}
		return txn.SetTTL(expiryKey(r.ExpiresAt, id), nil, max(r.ExpiresAt.Sub(r.At), 0)+reclaimGrace)
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

// peek reads the record of (scope, key), stored under id, outside the
// committer, from a read transaction. What it returns may be shared: the
// caller must not change it.
func (b *BadgerBackend) peek(scope, key string, id []byte) (*Record, error) {
	if e, ok := b.durableWrite(withPrefix(prefixRecord, id)); ok {
		return overlayRecord(e)
	}
	if v := b.openRecord(id); v != nil {
		return UnmarshalRecord(v) // a claim in progress, as last made durable
	}
	var rec *Record
	err := b.db.View(func(txn *badger.Txn) error {
		var err error
		rec, err = getRecord(txn, id)
		return err
	})
	return rec, err
}

// Get implements Backend.
func (b *BadgerBackend) Get(ctx context.Context, scope, key string) (*Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var rec *Record
	id := recordID(scope, key)
	// The writes not yet in Badger are looked up before the transaction
	// begins: one that leaves the overlay after this is committed before
	// the transaction's snapshot is taken.
	pendingRec, inLog := b.durableWrite(withPrefix(prefixRecord, id))
	pendingCounts, countsInLog := b.durableWrite(withPrefix(prefixCounts, id))
	err := b.db.View(func(txn *badger.Txn) error {
		var err error
		if inLog {
			rec, err = overlayRecord(pendingRec)
		} else {
			rec, err = getRecord(txn, id)
		}
		if err == nil && rec != nil {
			var t Tally
			if countsInLog {
				t = overlayCounts(pendingCounts)
			} else {
				t, err = getCounts(txn, id)
			}
			rec.apply(t)
		}
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

// Stale implements Backend. It reads the in-memory set of open claims,
// with their records as last made durable, and nothing from Badger: its
// cost does not grow with the number of done records.
func (b *BadgerBackend) Stale(ctx context.Context, now time.Time, limit int) ([]*Record, error) {
	type due struct {
		leaseEnds time.Time
		val       []byte
	}
	var ids []due
	b.mu.Lock()
	for _, c := range b.open {
		if !c.attention && !now.Before(c.leaseEnds) && !now.Before(c.nextCheck) {
			ids = append(ids, due{c.leaseEnds, c.val})
		}
	}
	b.mu.Unlock()
	sort.Slice(ids, func(i, j int) bool { return ids[i].leaseEnds.Before(ids[j].leaseEnds) })
	var out []*Record
	for _, d := range ids {
		if len(out) >= limit {
			break
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		// The open claims hold each record as last stored, durable: no
		// read of Badger, however many records it holds.
		rec, err := UnmarshalRecord(d.val)
		if err != nil {
			return nil, unavailable("stale", err)
		}
		if rec.Stale(now) && !now.Before(rec.NextCheck) && !rec.Attention {
			out = append(out, rec)
		}
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
				rec, err := w.record(e.id)
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
					if err := w.Delete(withPrefix(prefixCounts, e.id)); err != nil {
						return err
					}
					b.forgetTallied(e.id)
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
	b.settle()
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

// Counts beside records.
//
// A replay is counted in memory and the counts reach the backend in
// batches (tally.go). Rewriting a whole record to add to its counts would
// cost a read, a decode, an encode and a write of the record for every
// counted key every second. So the
// counts of a done or released record are kept beside it, under
// prefixCounts: one small entry per record, holding the counts added since
// the record was last written whole. Get and Scan add them to the
// record's own.
//
// Such an entry has its record's Badger TTL, so that neither outlives the
// other; Reclaim deletes both; a claim of a released record folds the
// entry into the new record (the life goes on), and a claim of an expired
// one deletes it (a new life starts at zero). An in-progress record (no
// TTL, and rewritten by its completion anyway) gets its counts written
// into it, as before.

// countsFormat is the version of the encoding of the counts beside a
// record: the version byte, then varints of the replays, conflicts and
// mismatches and of the last replay's and last rejection's Unix
// nanoseconds (0 for none).
const countsFormat = 1

func encodeCounts(t Tally) []byte {
	b := make([]byte, 0, 1+5*binary.MaxVarintLen64)
	b = append(b, countsFormat)
	b = binary.AppendVarint(b, t.Replays)
	b = binary.AppendVarint(b, t.Conflicts)
	b = binary.AppendVarint(b, t.Mismatches)
	b = binary.AppendVarint(b, unixNanos(t.LastReplay))
	return binary.AppendVarint(b, unixNanos(t.LastRejection))
}

func decodeCounts(v []byte) (Tally, error) {
	var t Tally
	if len(v) == 0 || v[0] != countsFormat {
		return t, fmt.Errorf("%w: counts of an unknown format", ErrCorrupt)
	}
	v = v[1:]
	var f [5]int64
	for i := range f {
		n, k := binary.Varint(v)
		if k <= 0 {
			return t, fmt.Errorf("%w: truncated counts", ErrCorrupt)
		}
		f[i], v = n, v[k:]
	}
	if len(v) != 0 {
		return t, fmt.Errorf("%w: counts with %d trailing bytes", ErrCorrupt, len(v))
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

// getCounts reads the counts kept beside the record of id from Badger;
// none or corrupt ones read as zero (counts are the record's story, never
// a reason to refuse the record).
func getCounts(txn getter, id []byte) (Tally, error) {
	item, err := txn.Get(withPrefix(prefixCounts, id))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return Tally{}, nil
	}
	if err != nil {
		return Tally{}, err
	}
	var t Tally
	err = item.Value(func(v []byte) error {
		t, _ = decodeCounts(v)
		return nil
	})
	return t, err
}

// overlayCounts decodes an overlay write of counts as Badger would answer
// for it once committed; none or corrupt ones read as zero.
func overlayCounts(e overlayEntry) Tally {
	if e.del || (e.expiresAt != 0 && e.expiresAt <= uint64(time.Now().Unix())) {
		return Tally{}
	}
	t, _ := decodeCounts(e.val)
	return t
}

// get reads key as the op's turn sees it (like record): its value, its
// Badger expiry, and whether it exists.
func (w *wtxn) get(key []byte) (val []byte, expiresAt uint64, ok bool, err error) {
	if _, mine := w.u.written[string(key)]; !mine {
		if e, ok := w.b.overlay[string(key)]; ok {
			if e.del || (e.expiresAt != 0 && e.expiresAt <= uint64(time.Now().Unix())) {
				return nil, 0, false, nil
			}
			return e.val, e.expiresAt, true, nil
		}
	}
	item, err := w.u.txn.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, 0, false, nil
	}
	if err != nil {
		return nil, 0, false, err
	}
	val, err = item.ValueCopy(nil)
	return val, item.ExpiresAt(), err == nil, err
}

// counts reads the counts beside the record of id as the op's turn sees
// them; none or corrupt ones read as zero.
func (w *wtxn) counts(id []byte) (Tally, error) {
	v, _, ok, err := w.get(withPrefix(prefixCounts, id))
	if !ok || err != nil {
		return Tally{}, err
	}
	t, _ := decodeCounts(v)
	return t, nil
}

// AddTallies implements Tallier. It merges the tallies of each record,
// then adds them in ops of bounded size: beside a done or released record,
// into an in-progress one. A record that no longer exists is skipped. An
// error may leave the ops before it applied.
func (b *BadgerBackend) AddTallies(ctx context.Context, tallies []Tally) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	type counted struct {
		id []byte
		t  Tally
	}
	index := make(map[string]int, len(tallies))
	all := make([]counted, 0, len(tallies))
	for _, t := range tallies {
		if len(t.Scope) > MaxScopeLen {
			continue // no such record can exist
		}
		id := recordID(t.Scope, t.Key)
		if i, ok := index[string(id)]; ok {
			all[i].t.add(t)
			continue
		}
		index[string(id)] = len(all)
		all = append(all, counted{id, t})
	}
	// An op writes at most half of what a Badger transaction holds, so
	// that a large batch never outgrows one.
	opBytes, opMax := int(b.db.MaxBatchSize()/2), int(b.db.MaxBatchCount()/2)
	b.tallyMu.Lock()
	defer b.tallyMu.Unlock()
	for len(all) > 0 {
		var n int
		err := b.batch(func(w *wtxn) error {
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
			b.cacheMu.Lock()
			b.tallied = nil
			b.cacheMu.Unlock()
			return unavailable("tally", err)
		}
		all = all[n:]
	}
	return nil
}

func (b *BadgerBackend) forgetTallied(id []byte) {
	b.cacheMu.Lock()
	delete(b.tallied, string(id))
	b.cacheMu.Unlock()
}

// maxTallied bounds the records tallied keeps; past it an arbitrary one
// is dropped (and read from the store when counted again).
const maxTallied = 1 << 16

// addTally adds t to the record of id, and returns about how many bytes
// it wrote. For a record in tallied it reads nothing.
func (b *BadgerBackend) addTally(w *wtxn, id []byte, t Tally) (int, error) {
	b.cacheMu.Lock()
	c, ok := b.tallied[string(id)]
	b.cacheMu.Unlock()
	if !ok {
		v, expiresAt, found, err := w.get(withPrefix(prefixRecord, id))
		if err != nil {
			return 0, err
		}
		if !found {
			return 0, nil // reclaimed since
		}
		if expiresAt == 0 {
			// No TTL: in progress (done and released records get one when
			// they are written), unless written by a tool; decode to know.
			rec, err := UnmarshalRecord(v)
			if errors.Is(err, ErrCorrupt) {
				return 0, nil // left for an operator
			}
			if err != nil {
				return 0, err
			}
			if rec.State == StateInProgress {
				rec.apply(t)
				v, err := MarshalRecord(rec)
				if err != nil {
					return 0, err
				}
				w.onCommit(func() { b.reopen(id, v) })
				return len(v), w.Set(withPrefix(prefixRecord, id), v)
			}
		}
		c.expiresAt = expiresAt
		if c.counts, err = w.counts(id); err != nil {
			return 0, err
		}
	}
	c.counts.add(t)
	e := badger.NewEntry(withPrefix(prefixCounts, id), encodeCounts(c.counts))
	e.ExpiresAt = c.expiresAt
	b.cacheMu.Lock()
	if b.tallied == nil {
		b.tallied = make(map[string]talliedRecord)
	}
	if _, kept := b.tallied[string(id)]; !kept && len(b.tallied) >= maxTallied {
		for k := range b.tallied {
			delete(b.tallied, k)
			break
		}
	}
	b.tallied[string(id)] = c
	b.cacheMu.Unlock()
	return len(e.Key) + len(e.Value), w.SetEntry(e)
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
	b.settle()
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
			t, err := getCounts(txn, it.Item().Key()[1:])
			if err != nil {
				return err
			}
			rec.apply(t)
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
	b.closeOnce.Do(func() { b.closeErr = b.close() })
	return b.closeErr
}

func (b *BadgerBackend) close() error {
	close(b.stopped)
	<-b.committerDone
	var err error
	if b.wal != nil {
		// With the committer gone nothing writes: a checkpoint leaves the
		// log with nothing to replay. If it fails, the frames are kept
		// for the next open.
		if b.brokenErr() == nil {
			err = b.checkpoint()
		}
		if cerr := b.wal.close(); err == nil {
			err = cerr
		}
	}
	if cerr := b.db.Close(); err == nil {
		err = cerr
	}
	return unavailable("close", err)
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
