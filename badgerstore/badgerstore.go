package badgerstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/internal/badger"
	"github.com/idemkit/idem/internal/badger/options"
	"github.com/idemkit/idem/internal/engine"
)

// Options tune the embedded Badger backend. The zero value is sized
// for a library embedded in a larger program: small memtables and caches,
// an empty store costs a few MiB of heap rather than Badger's ~90 MiB.
type Options struct {
	// InMemory keeps everything in memory (for tests); the directory is
	// ignored and nothing survives Close.
	InMemory bool
	// Durability is Durable (every commit synced before it is
	// acknowledged) unless set to Fast (backend.Durability). idem.Open
	// sets it from idem.Options.Durability.
	Durability backend.Durability
	// ReadOnly opens an existing store without writing to it (inspection
	// while no process holds the directory). Write calls fail.
	ReadOnly bool
	// MemoryBudget sizes Badger's memtables, caches and table builders
	// (see Options.MemoryBudget, which Open passes here when this is 0);
	// 0 means backend.DefaultMemoryBudget. The sizes below, when set, win over
	// it.
	MemoryBudget int64
	// MemTableSize is the size of one memtable; 0 means MemoryBudget/32
	// (1 to 64 MiB).
	MemTableSize int64
	// BlockCacheSize is the size of a cache of decompressed blocks; 0
	// means none: a compressed block is decoded at each read that needs
	// it (uncompressed tables are read through mmap).
	BlockCacheSize int64
	// ValueThreshold is the size above which a record is kept in the value
	// log rather than the LSM tree; 0 means 16 KiB.
	ValueThreshold int64
	// Logger receives Badger's warnings and errors; nil sends them to
	// slog.Default() (an operator must see a flush Badger keeps retrying).
	Logger *slog.Logger
	// FreeSpaceReserve is the free space the store keeps on its file
	// system: below it, new claims fail with ErrUnavailable (replays and
	// the completion of claims already made go on), and below half of it
	// a store does not open for writing. 0 sizes it from Badger's options
	// to what the engine may allocate at once, with M the memtable size
	// and N the memtables that may wait for a flush: N*2M of memtable
	// logs, (N+1)*M of the tables they flush to, the largest compaction
	// (NumLevelZeroTablesStall*M + BaseLevelSize), one table and the
	// tables below it for each other compactor, a write batch of values
	// (15% of M) and idem's log (8 MiB): about 70 MiB with the default
	// memory budget. A negative value turns the guard off. Writes resume
	// by themselves once space returns. docs/engine.md, "Free space".
	FreeSpaceReserve int64
	// SkipTableVerify skips the check of every table block that Open
	// makes. Badger takes a table block that fails its checksum during a
	// lookup for an absent key, so without the check a damaged block can
	// make the store forget the records in it (and run their effects
	// again) until Verify finds it. The check reads and decompresses the
	// whole LSM tree: about 0.2-0.4 s for 6 MiB of tables on a loaded
	// 2-core machine (docs/engine.md); set this for large stores whose
	// operator runs Verify instead.
	SkipTableVerify bool
	// CloseWait bounds how long Close waits for Badger to flush and close;
	// 0 means 10 seconds. Past it, Close returns an error wrapping
	// ErrUnavailable that says the directory lock is still held (the
	// close goes on in the background; a new open fails until it ends).
	CloseWait time.Duration
	// AcceptLoss opens a store that came back with less than it held
	// (tables a truncated MANIFEST lost, a lost idem.wal or memtable log,
	// a damaged idem.mark, a table block that fails its checksum): without
	// it such an open fails with ErrCorrupt naming what is missing. A
	// MANIFEST missing beside tables, and a table it names that is missing
	// or whose index is damaged, are refused even with it. With it the open
	// logs the loss to Logger as a warning, records it, and goes on.
	// Tables the MANIFEST lost are kept in idem.quarantine. A damaged
	// idem.wal is not accepted: remove it first. An operator's flag, for
	// one open after a loss was looked at; never set it by default.
	//
	// The store cannot tell which keys were lost, so the Store opens a
	// loss window (see LossWindow) lasting LossWindow, or else the
	// Retention: until it ends, a claim on an absent key (or on a key
	// released or expired before the loss) is held and the Resolver asked
	// before its effect runs. Committed: the Resolver's
	// result is saved and replayed (Do reports it replayed), the effect
	// does not run. Not committed: the claim goes on and the effect runs.
	// Unknown, an error, or no Resolver: the claim is held, in progress
	// with its lease ended, and the request fails with an
	// *OutcomeUnknownError, as for any claim whose outcome is unknown:
	// recovery asks again, and an operator sees it (idem ls) and may
	// settle it (Store.Settle). Each absent key claimed in the window
	// costs a Resolver call, brand-new keys too. The window is kept in
	// the store, survives restarts, ends by itself, and
	// Backend.EndLossWindow ends it early. The fencing token
	// counter jumps ahead when it opens, past any token a lost claim held.
	AcceptLoss bool
	// LossWindow is how long an accepted loss's window lasts (see
	// AcceptLoss); 0 means the Store's Retention. Set it to the longest
	// Request.Retention in use when a request overrides the retention
	// with a longer one: a key lost is held until it would have expired.
	LossWindow time.Duration
	// Compression is how the tables' blocks are compressed: S2 (the zero
	// value), zstd or none. A table builder compresses each block as it
	// is finished and holds only compressed ones; a read decodes the
	// block it needs (BlockCacheSize can keep decoded blocks). Stores
	// written with any of them open with any other.
	Compression Compression

	// tune, set only by tests (export_test.go), changes any engine
	// option last.
	tune func(*badger.Options)
}

// Key prefixes in the Badger keyspace. A record's id is its scope's length
// (one byte; scopes are at most 255 bytes), the scope, then the key, so no
// two (scope, key) pairs share an id.
const (
	prefixRecord = 'r' // r + id -> msgpack Record
	prefixClaim  = 'c' // c + id -> empty: an open claim, read once on open
	prefixExpiry = 'x' // x + big-endian unix nanos + id -> empty
	prefixCounts = 'u' // u + id + flush stamp -> counts one flush added to a done record (counts.go)
)

// reclaimGrace is added to Badger's own TTL on records. Badger's TTL has a
// one-second resolution on the wall clock, so it never decides expiry: the
// store does with its clock. The TTL only lets compaction drop what the
// reclaim sweep missed, well after the store stopped replaying it.
const reclaimGrace = time.Hour

// Backend is the embedded default Backend, storing records in a
// Badger directory through idem's commit pipeline (internal/engine). One
// process holds a directory at a time, which lets the backend keep the
// open claims in memory and know, on open, that every claim a previous
// process left is orphaned.
type Backend struct {
	eng        *engine.Engine
	ro         bool
	durability backend.Durability

	// lastToken is the highest fencing token handed out. Only the
	// committer reads or writes it.
	lastToken uint64
	// tokenCeil is the token counter's value known durable: tokens up to
	// it are handed out without writing the counter (nextToken).
	tokenCeil atomic.Uint64
	// lastFlush is the number of the last flush of counts (nextFlush).
	// Only the committer reads or writes it.
	lastFlush uint64

	// mu guards open, cursor and lossPending.
	mu sync.Mutex
	// open holds every in-progress claim with its record as last made
	// durable: Stale scans it instead of the records, and reads find an
	// open claim's record in it before Badger (readRecord), so a sweep
	// costs in proportion to open claims. It is written by OnCommit hooks.
	open map[string]openClaim
	// cursor is the last expiry index key Reclaim processed, so the next
	// scan seeks past the tombstones it left.
	cursor []byte

	gcMu sync.Mutex // serialises value-log garbage collection

	// loss is the loss window kept in the store, nil if none
	// (loss.go); lossPending is what an open accepted as lost
	// with no window opened yet, and lossLength Options.LossWindow.
	loss        atomic.Pointer[LossWindow]
	lossPending string
	lossLength  time.Duration
	logger      badgerLogger
}

type openClaim struct {
	leaseEnds, nextCheck time.Time
	attention            bool
	val                  []byte // the record, encoded; never changed
}

var _ backend.Backend = (*Backend)(nil)
var _ backend.Lister = (*Backend)(nil)
var _ backend.Maintainer = (*Backend)(nil)

// badgerOptions turns o into Badger's options: the sizes of its memory
// budget (memory.go), then o's explicit sizes. The reasons for
// the sizes are in docs/memory.md and docs/engine.md ("Badger's options").
func badgerOptions(dir string, o Options) (badger.Options, error) {
	bo := badger.DefaultOptions(dir)
	if o.InMemory {
		bo = badger.DefaultOptions("").WithInMemory(true)
	}
	budget := backend.MemoryBudget(o.MemoryBudget)
	bo = applyBudget(bo, budget).
		WithSyncWrites(false). // Durable syncs idem's own log instead
		WithReadOnly(o.ReadOnly).
		WithValueLogFileSize(64 << 20).
		WithMetricsEnabled(false).
		// The engine's committer is Badger's only transactional writer,
		// and an op reads from Badger only keys no unit still in flight
		// wrote (the others it reads from the pending writes): no commit
		// can conflict, so Badger keeps no read and write sets to check.
		WithDetectConflicts(false).
		WithLogger(badgerLogger{o.Logger}).
		// A block is checked when read from disk (not from the cache), so
		// a damaged key is an error, not a record silently missing (whose
		// effect would run again). Values need no check of Badger's: a
		// record carries its own checksum (record format 2).
		WithChecksumVerificationMode(options.OnBlockRead)
	if o.MemTableSize > 0 {
		bo.MemTableSize = o.MemTableSize
	}
	if o.BlockCacheSize > 0 {
		bo.BlockCacheSize = o.BlockCacheSize
	}
	if o.ValueThreshold > 0 {
		bo.ValueThreshold = o.ValueThreshold
	}
	bo, err := o.Compression.apply(bo)
	if err != nil {
		return bo, err
	}
	if o.tune != nil {
		o.tune(&bo)
	}
	return bo, nil
}

// Durability returns the durability the backend was opened with.
func (b *Backend) Durability() backend.Durability { return b.durability }

// Open opens or creates a Badger backend in dir. Claims left open by
// a previous process are orphaned: their lease is ended at once, so that
// recovery resolves them. Unless read-only or in memory, it makes dir 0700
// and the files in it 0600, whatever the umask (see makePrivate).
func Open(dir string, o Options) (*Backend, error) {
	bo, err := badgerOptions(dir, o)
	if err != nil {
		return nil, err
	}
	b := &Backend{ro: o.ReadOnly, durability: o.Durability, open: map[string]openClaim{}, lossLength: o.LossWindow, logger: badgerLogger{o.Logger}}
	private := !o.InMemory && !o.ReadOnly
	if private {
		// Only the directory itself before the lock is taken (engine.Open);
		// the files in it are made private once it is held.
		if err := makePrivate(dir); err != nil {
			return nil, fmt.Errorf("%w: open badger at %q: %w", backend.ErrUnavailable, dir, err)
		}
	}
	reserve := o.FreeSpaceReserve
	if reserve == 0 {
		reserve = engine.Reserve(bo)
	}
	eng, err := engine.Open(engine.Options{
		Badger:     bo,
		Reserve:    max(reserve, 0),
		Durable:    o.Durability == backend.Durable,
		Resident:   b.resident,
		AcceptLoss: o.AcceptLoss,
		Logger:     o.Logger,
		CloseWait:  o.CloseWait,

		SkipTableVerify: o.SkipTableVerify,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: open badger at %q: %w", backend.ErrUnavailable, dir, fromEngine(err))
	}
	b.eng = eng
	if o.ReadOnly {
		if err := b.loadLoss(); err != nil {
			_ = b.Close()
			return nil, backend.Unavailable("open", err)
		}
		return b, nil
	}
	if private {
		// The files Badger and the log created while opening.
		if err := privateFiles(dir); err != nil {
			_ = eng.Close()
			return nil, fmt.Errorf("%w: open badger at %q: %w", backend.ErrUnavailable, dir, err)
		}
	}
	err = b.eng.View(func(txn *badger.Txn) error {
		item, err := txn.Get(tokenKey)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return item.Value(func(v []byte) error {
			if len(v) != 8 {
				return fmt.Errorf("%w: token counter of %d bytes", backend.ErrCorrupt, len(v))
			}
			b.lastToken = binary.BigEndian.Uint64(v)
			b.tokenCeil.Store(b.lastToken)
			return nil
		})
	})
	if err == nil {
		err = b.migrateCounts()
	}
	if err == nil {
		err = b.orphanOpenClaims()
	}
	if err == nil {
		err = b.loadLoss()
	}
	if err != nil {
		_ = b.Close()
		return nil, backend.Unavailable("open", err)
	}
	return b, nil
}

// fromEngine gives an error of the engine the sentinels of this package;
// others (the ops' own) pass as they are.
func fromEngine(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, engine.ErrClosed):
		return backend.ErrClosed
	case errors.Is(err, engine.ErrReadOnly):
		return fmt.Errorf("%w: store opened read-only", backend.ErrUnavailable)
	case errors.Is(err, engine.ErrCorrupt):
		return fmt.Errorf("%w: %w", backend.ErrCorrupt, err)
	case errors.Is(err, engine.ErrUnapplied):
		return fmt.Errorf("%w: %w", ErrUnclean, err)
	}
	return err
}

// update runs fn as one op of the engine's next unit.
func (b *Backend) update(fn func(t *engine.Txn) error) error {
	return fromEngine(b.eng.Update(fn))
}

// tokenKey holds the token counter, big-endian: no token above it was
// handed out. Open resumes after it.
var tokenKey = []byte("s/token")

// tokenBlock is how many tokens one write of the counter reserves: a
// claim writes the counter only when its token is above the value known
// durable, and then writes that token plus tokenBlock-1.
var tokenBlock uint64 = 1024 // a variable for the crash test's small blocks

// nextToken hands out a token. When the token is above the counter known
// durable, it writes the counter, a block ahead, with the claim that
// holds the token; otherwise a unit already durable holds a counter at or
// above it. Units become durable in order, so no claim is ever durable
// without a counter at or above its token: a reopen never hands a token
// out twice. Tokens reserved and not handed out before a restart are
// skipped. It runs on the committer only.
func (b *Backend) nextToken(t *engine.Txn) uint64 {
	b.lastToken++
	if b.lastToken > b.tokenCeil.Load() {
		ceil := b.lastToken + tokenBlock - 1
		t.Set(tokenKey, binary.BigEndian.AppendUint64(make([]byte, 0, 8), ceil), 0)
		// Until this runs, later claims write the counter again.
		t.OnCommit(func() { raiseTo(&b.tokenCeil, ceil) })
	}
	return b.lastToken
}

// raiseTo sets v to x if x is above it.
func raiseTo(v *atomic.Uint64, x uint64) {
	for {
		old := v.Load()
		if x <= old || v.CompareAndSwap(old, x) {
			return
		}
	}
}

// DiskUsage is the space a Badger store takes on disk: the blocks
// allocated to its files where the system tells (an open store's logs are
// sparse, preallocated files), their sizes elsewhere.
type DiskUsage struct {
	// LSM sums Badger's tables, VLog its value logs, Log idem's own log,
	// and Total every file, memtable logs and manifest included.
	LSM, VLog, Log, Total int64
	// Free is what the directory's file system has free (-1 where it
	// cannot be measured), Reserve the free space below which new claims
	// are refused with ErrUnavailable (Options.Reserve).
	Free, Reserve int64
}

// DiskUsage measures the store's directory now. An in-memory store takes
// no space on disk: every field is zero.
func (b *Backend) DiskUsage() (DiskUsage, error) {
	u, err := b.eng.DiskUsage()
	if err != nil {
		return DiskUsage{}, backend.Unavailable("disk usage", err)
	}
	return DiskUsage{LSM: u.Tables, VLog: u.ValueLog, Log: u.Log, Total: u.Total, Free: u.Free, Reserve: u.Reserve}, nil
}

// orphanOpenClaims ends the lease of every claim left by an earlier
// process: the directory lock means no live process holds them. It walks
// the claim index, whose size is the number of open claims (plus
// tombstones not yet compacted), never the records.
func (b *Backend) orphanOpenClaims() error {
	var ids [][]byte
	err := b.eng.View(func(txn *badger.Txn) error {
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
	// One op per thousand claims, not one per claim.
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
func (b *Backend) orphan(ids [][]byte) error {
	return b.update(func(t *engine.Txn) error {
		for _, id := range ids {
			rec, _, err := b.readRecord(t, id)
			if err != nil {
				return err
			}
			if rec == nil || rec.State != backend.StateInProgress {
				t.Delete(withPrefix(prefixClaim, id))
				continue
			}
			rec.LeaseEnds = time.Time{}
			rec.Owner = ""
			if openNote(rec) == "" {
				// A note already there says more: why the claim was held.
				rec.NoteAttempt(rec.Token, "orphaned by a restart")
			}
			if err := b.put(t, id, rec, time.Time{}); err != nil {
				return err
			}
		}
		return nil
	})
}

// openNote returns the note of rec's open attempt, if any.
func openNote(rec *backend.Record) string {
	for i := len(rec.Attempts) - 1; i >= 0; i-- {
		if a := rec.Attempts[i]; a.Token == rec.Token {
			return a.Reason
		}
	}
	return ""
}

func recordID(scope, key string) []byte {
	return appendRecordID(make([]byte, 0, 1+len(scope)+len(key)), scope, key)
}

// recordKey returns the Badger key of the record of (scope, key),
// prefixRecord and its id, in one allocation: key[1:] is the id.
func recordKey(scope, key string) []byte {
	return appendRecordID(append(make([]byte, 0, 2+len(scope)+len(key)), prefixRecord), scope, key)
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

// badgerTTL is Badger's expiry, in unix seconds, for a write that Badger
// may drop d from now.
func badgerTTL(d time.Duration) uint64 { return uint64(time.Now().Add(d).Unix()) }

// Maintain folds the counts beside records (counts.go), then runs
// Badger's value-log garbage collection once, so that space freed by
// reclaimed records returns to the disk over time. The store calls
// it from its background sweep. What the collection rewrites is synced
// before the value-log files it emptied are deleted (Engine.ValueLogGC).
func (b *Backend) Maintain(ctx context.Context) error {
	if b.ro || !b.gcMu.TryLock() {
		return nil
	}
	defer b.gcMu.Unlock()
	if err := b.foldCounts(ctx); err != nil {
		return backend.Unavailable("maintain", err)
	}
	_, err := b.eng.ValueLogGC(ctx, 0.5, 4)
	return backend.Unavailable("maintain", fromEngine(err))
}

// Scan implements Lister.
func (b *Backend) Scan(ctx context.Context, fn func(*backend.Record) bool) error {
	err := b.eng.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixRecord}, PrefetchValues: true, PrefetchSize: 64})
		defer it.Close()
		counts := newCountsReader(txn)
		defer counts.close()
		for it.Rewind(); it.Valid(); it.Next() {
			if err := ctx.Err(); err != nil {
				return err
			}
			var rec *backend.Record
			if err := it.Item().Value(func(v []byte) error {
				var err error
				rec, err = backend.DecodeRecord(v)
				return err
			}); err != nil {
				return damaged(err, it.Item().Key()[1:])
			}
			counts.add(it.Item().Key()[1:], rec)
			if !fn(rec) {
				return nil
			}
		}
		return nil
	})
	return backend.Unavailable("scan", err)
}

// Close implements Backend.
func (b *Backend) Close() error {
	return backend.Unavailable("close", b.eng.Close())
}

// badgerLogger hands Badger's warnings and errors to slog and drops its
// chatty info and debug lines.
type badgerLogger struct{ l *slog.Logger }

func (g badgerLogger) Errorf(f string, a ...any) {
	g.logger().Error("badger: " + fmt.Sprintf(f, a...))
}
func (g badgerLogger) Warningf(f string, a ...any) {
	g.logger().Warn("badger: " + fmt.Sprintf(f, a...))
}

func (g badgerLogger) logger() *slog.Logger {
	if g.l != nil {
		return g.l
	}
	return slog.Default()
}
func (g badgerLogger) Infof(string, ...any)  {}
func (g badgerLogger) Debugf(string, ...any) {}
