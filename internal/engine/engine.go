package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/internal/badger"
	"github.com/idemkit/idem/internal/wal"
)

// LogName is the name of idem's log in the Badger directory.
const LogName = "idem.wal"

// DefaultCloseWait is how long Close waits for Badger by default.
const DefaultCloseWait = 10 * time.Second

// LockName is the file in the directory idem locks (flock) before it
// touches anything else there.
const LockName = "idem.lock"

var (
	// ErrClosed is returned by Update once Close has begun.
	ErrClosed = errors.New("engine: closed")
	// ErrReadOnly is returned by Update on an engine opened read-only.
	ErrReadOnly = errors.New("engine: opened read-only")
	// ErrUnapplied is returned by a read-only Open when the log holds
	// writes that Badger may not: only a read-write open applies them.
	ErrUnapplied = errors.New("engine: the log holds writes not yet applied")
	// ErrNoWrite may be returned by an op to end without writing; Update
	// then returns nil.
	ErrNoWrite = errors.New("engine: no write")
	// ErrCloseTimeout is returned by Close when closing did not finish
	// within Options.CloseWait.
	ErrCloseTimeout = errors.New("engine: close did not finish")
	// ErrLocked is returned by Open when another process (or another
	// open in this one) holds the directory.
	ErrLocked = errors.New("engine: directory locked by another open store")
	// ErrCorrupt is returned by Open when the directory holds less than
	// it held or damaged files (the log, the mark, Badger's tables or
	// MANIFEST); the message names what.
	ErrCorrupt = errors.New("engine: damaged store")
)

// Options configure Open.
type Options struct {
	// Badger are the options Badger is opened with. SyncWrites should be
	// off: under Durable, the engine syncs its own log instead.
	Badger badger.Options
	// Durable logs and syncs every unit before answering its ops; else
	// (Fast) an op is answered once Badger holds its unit.
	Durable bool
	// Resident, if set, returns the value the caller keeps in memory for
	// key, or nil. Read consults it after the pending writes and before
	// Badger, so it must mirror the key's last durable write (set it from
	// an OnCommit hook) and must have no expiry.
	Resident func(key []byte) []byte
	// AcceptLoss opens a store that comes back with less than its mark
	// says it held (ErrCorrupt otherwise), logging what was lost to
	// Logger, and makes what it holds the new mark. What was lost is
	// recorded durably under LossKey before the new mark is written, for
	// the store above to act on (and delete) before it forgets the loss.
	AcceptLoss bool
	// Reserve is the free space (bytes) the file system must keep:
	// LowSpace reports less, and Open refuses to open a store for writing
	// with less than half of it (enough to open, replay the log and close:
	// a store refused claims at the reserve and then closed has used some
	// of it, and must still open to replay what it acknowledged). 0 turns
	// the guard off.
	Reserve int64
	// SkipTableVerify skips reading every table block at open
	// (verifyTables), which costs a decompression of the whole LSM tree.
	SkipTableVerify bool
	// CloseWait bounds Close; 0 means DefaultCloseWait.
	CloseWait time.Duration
	// Logger receives the engine's warnings; nil discards them.
	Logger *slog.Logger
	// BufferedLog writes the log without O_DIRECT (tests of the fallback).
	BufferedLog bool
	// BeforeLog and BeforeApply, if set, run before unit seq is logged
	// (on the syncer, or on a lone caller running its op alone) and on
	// the applier before it commits one (tests).
	BeforeLog, BeforeApply func(seq uint64)
}

// Engine is an open Badger directory and its commit pipeline.
type Engine struct {
	db *badger.DB
	// latest is the read transaction every unit and every reader shares:
	// it has no snapshot and no read timestamp
	// (badger.DB.NewTransactionLatest), so nothing in it changes as it
	// reads, and it is never discarded.
	latest *badger.Txn
	dir    string
	ro     bool
	opts   Options
	lock   *os.File // idem's directory lock (lockDir); nil in memory
	// mark is the high-water mark as last written (mark.go); the syncer
	// (or a caller holding the committer's role, see role) owns it while
	// the committer runs.
	mark mark
	// saved is the mark as this open last wrote it to MarkName, nil
	// until it writes one.
	saved *mark
	// lost says what an open under AcceptLoss accepted as lost, if
	// anything (recordLoss).
	lost []string
	// space watches the free space (LowSpace).
	space spaceGuard

	// log is the log of a Durable engine, nil otherwise; it belongs to
	// the syncer (or a caller holding the committer's role) while the
	// committer runs.
	log *wal.Log
	// broken, once set, stops all writing until a reopen.
	brokenMu sync.Mutex
	broken   error

	// The pending-writes index: the writes of units handed to the syncer
	// and not yet in Badger, by key, and the order to retire them in. The
	// committer alone writes it, under pendingMu; readers outside it take
	// pendingMu. seq numbers units; retired is the last unit the applier
	// finished (every unit up to it is in Badger, or wrote nothing);
	// durable is the last unit synced to the log (Durable only).
	pending   map[string]pendingWrite
	pendingMu sync.RWMutex
	sealed    []sealedKey
	seq       uint64
	retired   atomic.Uint64
	durable   atomic.Uint64
	// settleMu and settleCond let scans wait for Badger to hold every
	// answered write (settle); settling counts the waiters.
	settleMu   sync.Mutex
	settleCond *sync.Cond
	settling   atomic.Int32
	// kick wakes the applier, which sleeps on it whenever it has nothing
	// to apply (applier, handApplier).
	kick chan struct{}

	// ops feeds the committer, the only writer; stopped is closed by
	// Close, and committerDone when the committer returned.
	ops           chan op
	stopped       chan struct{}
	committerDone chan struct{}

	// role is the committer's role as a token, with room for one: the
	// committer puts it in while it waits idle after a lone unit, and a
	// caller that finds it there runs its op alone (Update, alone) and
	// puts it back; the committer takes it back before it does anything
	// else. Whoever holds it owns what the committer owns: the unit being
	// filled, seq, the pending index's writes, and pipe, the handshake
	// with the syncer and the applier (set once by the committer).
	role chan struct{}
	pipe *pipe
	lone int // how many units in a row held one op each

	closeOnce sync.Once
	closeErr  error
}

// Open opens the Badger directory of o.Badger, replays the log into it
// and starts the pipeline (unless read-only).
func Open(o Options) (*Engine, error) {
	bo := o.Badger
	var lock *os.File
	if !bo.InMemory {
		var err error
		if lock, err = lockDir(bo.Dir, bo.ReadOnly); err != nil {
			return nil, err
		}
	}
	e, err := open(o, lock)
	if err != nil && lock != nil {
		lock.Close()
	}
	return e, err
}

func open(o Options, lock *os.File) (*Engine, error) {
	// One log: under Durable every write Badger takes is in idem's log
	// first, so Badger's memtables keep no log of their own, and a
	// checkpoint flushes them to synced tables (syncBadgerFiles).
	o.Badger.DisableMemTableWAL = o.Durable && !o.Badger.InMemory && !o.Badger.ReadOnly
	bo := o.Badger
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	var m *mark
	var pf preflight
	var lost []string
	if !bo.InMemory {
		if err := checkRestoring(bo.Dir); err != nil {
			return nil, err
		}
		var err error
		if m, err = readMark(bo.Dir); err != nil {
			if !o.AcceptLoss || !errors.Is(err, ErrCorrupt) {
				return nil, err
			}
			o.Logger.Warn("engine: accepting loss: " + err.Error())
			lost = append(lost, err.Error())
		}
		if pf, err = checkBefore(bo.Dir, bo); err != nil {
			return nil, err
		}
	}
	if !bo.InMemory && !bo.ReadOnly {
		// Opening makes a memtable log (and idem's log, if none) and
		// replays idem's log into Badger: refused here, with a clear
		// error, rather than failing on a full disk midway.
		if free, ok := freeSpace(bo.Dir); ok {
			if err := lowSpaceErr(free, o.Reserve/2); err != nil {
				return nil, fmt.Errorf("cannot open for writing: %w", err)
			}
		}
		if err := removeEmptyLogs(bo.Dir); err != nil {
			return nil, err
		}
	}
	db, err := openBadger(bo)
	if err != nil {
		if !bo.InMemory {
			if terr := openTables(bo); terr != nil {
				return nil, terr // names the table that failed
			}
		}
		return nil, err
	}
	e := &Engine{db: db, latest: db.NewTransactionLatest(), dir: bo.Dir, ro: bo.ReadOnly, opts: o, lock: lock, lost: lost,
		ops: make(chan op, maxGroup), stopped: make(chan struct{}), committerDone: make(chan struct{}),
		role: make(chan struct{}, 1), kick: make(chan struct{}, 1)}
	e.settleCond = sync.NewCond(&e.settleMu)
	e.space.reserve = o.Reserve
	if !bo.InMemory {
		if err := e.checkStored(m, pf); err != nil {
			_ = db.Close()
			return nil, err
		}
	}
	if bo.ReadOnly {
		close(e.committerDone)
		if !bo.InMemory {
			n, err := wal.Pending(filepath.Join(e.dir, LogName))
			err = logErr(err)
			if err == nil && n > 0 {
				err = fmt.Errorf("%w: %d groups of writes", ErrUnapplied, n)
			}
			if err != nil {
				_ = db.Close()
				return nil, err
			}
		}
		return e, nil
	}
	if !bo.InMemory {
		if err := e.openLog(o.Durable); err != nil {
			_ = db.Close()
			return nil, logErr(err)
		}
	}
	if !bo.InMemory && e.needsMark(m) {
		// A mark from the start: a new store's log must not vanish either,
		// and a loss accepted is not refused again, but is recorded first.
		err := e.recordLoss()
		switch {
		case err != nil:
		case m == nil && len(e.lost) == 0 && e.log != nil && !e.badgerMarked():
			err = e.firstMark()
		default:
			err = e.markDurable()
		}
		if err != nil {
			if e.log != nil {
				_ = e.log.Close()
			}
			_ = db.Close()
			return nil, err
		}
	}
	go e.committer()
	return e, nil
}

// logErr gives a damaged log this package's ErrCorrupt.
func logErr(err error) error {
	if errors.Is(err, wal.ErrCorrupt) {
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if err != nil {
		return fmt.Errorf("log: %w", err)
	}
	return nil
}

// openBadger opens Badger, turning a panic on this goroutine into an
// error. checkBefore keeps what it knows panics on other goroutines out.
func openBadger(bo badger.Options) (db *badger.DB, err error) {
	defer func() {
		if r := recover(); r != nil {
			db, err = nil, fmt.Errorf("%w: Badger failed opening %s: %v", ErrCorrupt, bo.Dir, r)
		}
	}()
	return badger.Open(bo)
}

// checkStored checks, with Badger open, the tables checkBefore moved aside
// and the mark; under AcceptLoss a loss is logged, noted in e.lost and
// accepted, and the checks go on.
func (e *Engine) checkStored(m *mark, pf preflight) error {
	accept := func(err error) error {
		if err != nil && e.opts.AcceptLoss && errors.Is(err, ErrCorrupt) {
			e.opts.Logger.Warn("engine: accepting loss: " + err.Error())
			e.lost = append(e.lost, err.Error())
			return nil
		}
		return err
	}
	pf = e.coveredByLog(m, pf)
	err := accept(checkAfter(e.dir, e.db, pf, e.opts.AcceptLoss))
	// The tables before the mark: Badger reads a damaged block as holding
	// nothing, so the mark's check would blame a lost checkpoint for what
	// the tables' check names (the table, its block).
	if err == nil && !e.opts.SkipTableVerify {
		err = accept(verifyTables(e.db))
	}
	if err == nil {
		err = e.checkMark(m)
		if err != nil && e.opts.SkipTableVerify {
			if terr := verifyTables(e.db); terr != nil {
				err = terr // the cause, skipped above
			}
		}
		err = accept(err)
	}
	if m != nil {
		e.mark = *m
		if id, n, _ := storedMark(e.db); id != nil {
			e.mark.Store, e.mark.Checkpoint = fmt.Sprintf("%x", id), max(n, m.Checkpoint)
		}
	}
	return err
}

// verifyTables checks every block of every table against its checksum.
// Badger takes a block that fails its checksum during a lookup for a key
// that is absent, so a damaged block would silently forget the records
// in it (and their effects would run again): the open refuses instead.
// It reads every table once (docs/engine.md, "Opening under faults").
func verifyTables(db *badger.DB) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: verifying tables: %v", ErrCorrupt, r)
		}
	}()
	if err := db.VerifyChecksum(); err != nil {
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return nil
}

// VerifyTables checks every block of every table against its checksum.
func (e *Engine) VerifyTables() error {
	if e.db.Opts().InMemory {
		return nil
	}
	return verifyTables(e.db)
}

// VerifyLog reads the log as an open would and reports damage; a store
// without one (Fast, in memory) has none to check.
func (e *Engine) VerifyLog() error {
	if e.db.Opts().InMemory {
		return nil
	}
	_, err := wal.Pending(filepath.Join(e.dir, LogName))
	return logErr(err)
}

// badgerMarked reports whether Badger holds a mark (or cannot tell).
func (e *Engine) badgerMarked() bool {
	id, _, err := storedMark(e.db)
	return id != nil || err != nil
}

// needsMark reports whether an open must take a checkpoint of the mark:
// for a new store, a loss accepted, a log the mark does not know of yet, or
// a mark file behind what Badger holds. An open that found the mark as it
// left it (and replayed nothing, or checkpointed after the replay) takes
// none: without memtable logs the checkpoint would flush a table holding
// the mark alone at every open.
func (e *Engine) needsMark(m *mark) bool {
	if e.saved != nil {
		m = e.saved // the replay's checkpoint wrote it
	}
	return m == nil || len(e.lost) > 0 || (e.log != nil && !m.Log) || e.mark.Checkpoint != m.Checkpoint
}

// markDurable takes a checkpoint of the mark alone: Badger's files synced
// with a new mark in them, then the mark file.
func (e *Engine) markDurable() error {
	if err := e.advanceMark(); err != nil {
		return err
	}
	if err := syncBadgerFiles(e.db, e.dir); err != nil {
		return err
	}
	return e.saveMark()
}

// Close stops the pipeline once the ops handed to it are answered,
// checkpoints (so that the log has nothing to replay) and closes Badger.
// It returns within Options.CloseWait whatever the disk does (Badger
// retries a failed memtable flush forever, on a read-only file system):
// then with ErrCloseTimeout, the close going on in the background and the
// directory still locked until it ends.
func (e *Engine) Close() error {
	e.closeOnce.Do(func() {
		done := make(chan error, 1)
		go func() { done <- e.close() }()
		wait := e.opts.CloseWait
		if wait <= 0 {
			wait = DefaultCloseWait
		}
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case e.closeErr = <-done:
		case <-t.C:
			e.closeErr = fmt.Errorf("%w after %v: the directory lock is still held until it ends", ErrCloseTimeout, wait)
		}
	})
	return e.closeErr
}

func (e *Engine) close() error {
	if !e.ro {
		close(e.stopped)
	}
	<-e.committerDone
	var err error
	if e.log != nil {
		// With the committer gone nothing writes. If the checkpoint
		// fails, the frames are kept for the next open.
		if e.brokenErr() == nil {
			err = e.checkpoint()
		}
		if cerr := e.log.Close(); err == nil {
			err = cerr
		}
	}
	// Fast takes no checkpoints: the mark advances at Close, and is
	// written once Badger's Close made everything durable.
	fastMark := !e.ro && e.log == nil && !e.db.Opts().InMemory && e.brokenErr() == nil
	if fastMark {
		if merr := e.advanceMark(); err == nil {
			err = merr
		}
	}
	if cerr := e.db.Close(); err == nil {
		err = cerr
		if fastMark && err == nil {
			err = e.saveMark()
		}
	}
	if e.lock != nil {
		e.lock.Close()
	}
	return err
}

// DB returns the Badger database, for maintenance and tests. Writes made
// through it bypass the log and the pending writes.
func (e *Engine) DB() *badger.DB { return e.db }

// Log returns the log of a Durable engine, else nil (tests).
func (e *Engine) Log() *wal.Log { return e.log }

// View runs fn in a Badger read transaction, once Badger holds every
// answered write: for scans, which the pending writes cannot answer.
func (e *Engine) View(fn func(txn *badger.Txn) error) error {
	e.settle()
	return e.db.View(fn)
}

// pendingWrite is a write of a unit handed to the syncer and not yet
// committed to Badger. Several units in the pipeline may have written one
// key: the latest write is in the index, and older ones still pending
// hang from it, newest first, for readers that must not see the latest
// before it is durable.
type pendingWrite struct {
	val       []byte
	del       bool
	expiresAt uint64 // Badger's TTL, unix seconds; 0 for none
	seq       uint64
	older     *pendingWrite
}

// Read calls fn with the value of key and its Badger expiry (unix
// seconds, 0 for none), and reports whether key holds a value. t is the
// op asking, or nil for a reader outside the committer. The first layer
// that knows the key answers:
//
//  1. t's unit, if an op before t in it wrote key (an op does not read
//     its own writes).
//  2. The pending writes: for an op, the latest; for a reader, the latest
//     durable one (never one not yet durable).
//  3. Options.Resident.
//  4. Badger: t's transaction, or a read transaction begun after step 2,
//     so that a write leaving the pending index meanwhile is in it.
//
// A deleted or expired write reads as absent. val is valid only during fn.
func (e *Engine) Read(t *Txn, key []byte, fn func(val []byte, expiresAt uint64) error) (bool, error) {
	if t != nil {
		if w, ok := t.u.wrote(key); ok {
			if w.Delete || (w.ExpiresAt != 0 && w.ExpiresAt <= uint64(time.Now().Unix())) {
				return false, nil
			}
			return true, fn(w.Value, w.ExpiresAt)
		}
	}
	if known, found, err := e.readAbove(key, t != nil, fn); known {
		return found, err
	}
	if t != nil {
		return get(t.u.txn, key, fn)
	}
	// A reader reads the key's newest version in Badger too
	// (badger.DB.NewTransactionLatest: no wait for the applier's commit in
	// progress, no read timestamp): a durable unit not yet retired is in
	// the pending index, which answered above for every key it wrote, and
	// any unit committed since is durable (under Fast its commit has not
	// been answered yet, so it may or may not be seen). One key, so no
	// snapshot is needed; and every unit retired before the read began is
	// in what it reads (ReadStamped).
	if e.db.IsClosed() {
		return false, badger.ErrDBClosed
	}
	return get(e.latest, key, fn)
}

// Stamp is what a read outside the committer that found no value tells an
// op that reads the same key later (ReadStamped, Txn.ReadAfter).
type Stamp struct {
	retired uint64 // the retired unit before the read began
	miss    bool   // the read found no value
}

// ReadStamped is Read outside the committer (t nil), and returns with its
// answer a Stamp that lets an op reading key afterwards skip Badger when
// this read found nothing there (Txn.ReadAfter).
func (e *Engine) ReadStamped(key []byte, fn func(val []byte, expiresAt uint64) error) (bool, Stamp, error) {
	// Loaded before the read: every unit up to it is in Badger before the
	// read's transaction begins.
	s := Stamp{retired: e.retired.Load()}
	found, err := e.Read(nil, key, fn)
	s.miss = err == nil && !found
	return found, s, err
}

// ReadAfter is Read for an op that follows a read of the same key by
// ReadStamped (the zero Stamp: none). When that read found nothing and
// every unit no longer in the pending index was in Badger before it began,
// Badger has no value of key for this op either unless a unit found in
// the pending index wrote one: the pending index, the unit's own writes
// and Options.Resident answer, and Badger is not read again.
//
// Why: let A be the retired unit s holds and b the op's unit's base. The
// stamped read's transaction saw every unit up to A, and later ones, and
// found no value. The op's transaction sees every unit up to b, and every
// unit after b that wrote key is in the pending index. If b <= A and none
// of them wrote key, the key's last write among all the units Badger holds
// for the op is one the stamped read saw too: none, or a deletion.
func (t *Txn) ReadAfter(key []byte, s Stamp, fn func(val []byte, expiresAt uint64) error) (bool, error) {
	if _, wrote := t.u.wrote(key); !s.miss || t.u.base > s.retired || wrote {
		return t.Read(key, fn)
	}
	_, found, err := t.e.readAbove(key, true, fn)
	return found, err
}

// readAbove reads key from the layers above Badger, the pending writes
// (as the committer or a reader outside it sees them) and then
// Options.Resident, and reports whether one of them knew the key.
func (e *Engine) readAbove(key []byte, committer bool, fn func(val []byte, expiresAt uint64) error) (known, found bool, err error) {
	if w, ok := e.pendingWrite(key, committer); ok {
		if w.del || (w.expiresAt != 0 && w.expiresAt <= uint64(time.Now().Unix())) {
			return true, false, nil
		}
		return true, true, fn(w.val, w.expiresAt)
	}
	if e.opts.Resident != nil {
		if v := e.opts.Resident(key); v != nil {
			return true, true, fn(v, 0)
		}
	}
	return false, false, nil
}

// pendingWrite returns the write of key in the pending index that a
// reader sees: the latest for the committer (which alone writes the
// index, so reads it without the lock), the latest durable one for others.
func (e *Engine) pendingWrite(key []byte, committer bool) (pendingWrite, bool) {
	if committer {
		w, ok := e.pending[string(key)]
		return w, ok
	}
	if e.log == nil {
		return pendingWrite{}, false // Fast: Badger holds every answered unit
	}
	d := e.durable.Load()
	if d <= e.retired.Load() {
		return pendingWrite{}, false // every durable unit is in Badger
	}
	e.pendingMu.RLock()
	defer e.pendingMu.RUnlock()
	w, ok := e.pending[string(key)]
	for ok && w.seq > d {
		if w.older == nil {
			return pendingWrite{}, false
		}
		w = *w.older
	}
	return w, ok
}

func get(txn *badger.Txn, key []byte, fn func(val []byte, expiresAt uint64) error) (bool, error) {
	item, err := txn.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, item.Value(func(v []byte) error { return fn(v, item.ExpiresAt()) })
}

// Txn is what an op sees: reads through its unit (Read), writes buffered
// until the op succeeds, so that a failed op writes nothing.
type Txn struct {
	e     *Engine
	u     *unit
	ents  []wal.Entry // the buffered writes, in order
	keys  []string    // ents' keys as strings, once the op is kept
	after []func()
	// Room for the writes and hooks of a usual op (a claim or a
	// completion writes three entries and one hook), so that buffering
	// them allocates nothing more.
	entBuf   [4]wal.Entry
	keyBuf   [4]string
	afterBuf [2]func()
}

// newTxn returns the Txn of an op of u.
func newTxn(e *Engine, u *unit) *Txn {
	t := txns.Get().(*Txn)
	t.e, t.u = e, u
	t.ents, t.after = t.entBuf[:0], t.afterBuf[:0]
	return t
}

// recycle puts t back for reuse, once nothing refers to it (unit.recycle).
func (t *Txn) recycle() {
	*t = Txn{} // the rooms too: they may hold what a longer op moved out
	txns.Put(t)
}

// Read reads key as the op sees it (Engine.Read).
func (t *Txn) Read(key []byte, fn func(val []byte, expiresAt uint64) error) (bool, error) {
	return t.e.Read(t, key, fn)
}

// Set buffers a write; expiresAt is Badger's TTL in unix seconds, 0 for
// none. Neither slice may change afterwards.
func (t *Txn) Set(key, val []byte, expiresAt uint64) {
	t.ents = append(t.ents, wal.Entry{Key: key, Value: val, ExpiresAt: expiresAt})
}

// Delete buffers a deletion.
func (t *Txn) Delete(key []byte) {
	t.ents = append(t.ents, wal.Entry{Key: key, Delete: true})
}

// OnCommit arranges for fn to run once the op's writes are durable, in
// commit order, before the op is answered; it never runs if the commit
// fails.
func (t *Txn) OnCommit(fn func()) { t.after = append(t.after, fn) }

// MaxBatch returns how many bytes and entries one Badger transaction
// holds: an op should write well under either.
func (e *Engine) MaxBatch() (size, count int64) { return e.db.MaxBatchSize(), e.db.MaxBatchCount() }
