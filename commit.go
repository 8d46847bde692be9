package idem

import (
	"errors"
	"fmt"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// Group commit for the Badger backend.
//
// A synced store that commits each claim on its own is bound to the disk's
// sync rate, shared by every goroutine. So every read-modify-write of the
// backend runs as an op on one committer goroutine, which runs the ops
// into a unit (one transaction); a syncer goroutine makes whole units
// durable, one log frame and one synced write each (wal.go), and answers
// their ops; an applier goroutine then commits them to Badger, in order.
// The three overlap: while the syncer syncs unit N, the committer runs the
// ops that arrive into unit N+1, and hands it over as soon as the syncer
// is free, and the applier commits unit N-1. Under load a unit holds
// every op that arrived during the last sync, and the syncs are shared by
// all of them; a unit's Badger commit never delays the next unit's sync.
//
// Why this keeps the contract:
//
//   - Atomic claims. Ops run one at a time on the committer, each reading
//     the writes of the ops before it: those of its own unit through the
//     transaction, those of the unit being synced through the overlay (the
//     unit's writes by key, kept until its commit), and everything older
//     through Badger; but an open claim's record comes from the open
//     claims, which hold its last write, set by the unit's hooks before the
//     applier may commit the unit and the overlay drop it (so the latest
//     write is always in one of the two), and which spare a sweep reading
//     records from a large LSM tree. Two claims of one key, in one unit or
//     in two: the second reads the first's record and does not claim. The
//     committer is the only writer (Badger's directory lock keeps other
//     processes out), so no write can slip between an op's read and its
//     write. The overlay is pruned only when a transaction begins, after
//     the units it drops are committed, so no read falls between the two;
//     and a transaction never reads from Badger a key that the unit
//     committed during its life wrote, so Badger's conflict detection
//     never fires.
//   - Durability. Under Durable, a unit's writes are framed into the
//     store's log and synced before its transaction is committed, and no op
//     is answered before that. A claim is thus durable before its effect
//     runs and a result before its caller hears of it, exactly as with one
//     synced commit per op. Nothing rides on a later sync, and an op that
//     wrote nothing is answered with its unit, after everything it read.
//     The ops are answered as soon as the sync returns, and the Badger
//     commit follows while their callers go on; until it lands, readers
//     outside the committer (Get, the replay path) find the unit's writes
//     in the overlay. They never see a write that is not yet durable, and
//     always see one that was answered: when units in the pipeline wrote
//     one key, the overlay keeps each pending write, and readers take the
//     latest durable one. They look in the overlay before their Badger
//     transaction begins, so a write that leaves the overlay meanwhile is
//     in their snapshot. Under Fast, there is no log: a
//     unit is answered once Badger holds it.
//   - Failure. If a unit's log write, sync or commit fails, its ops get the
//     error (wrapping ErrUnavailable), their in-memory side effects (the
//     open-claim set) are not applied, and the store refuses
//     every later write until it is reopened: the next unit has read the
//     failed one's writes, and the log may hold a frame that Badger does
//     not, which a reopen replays. Reads go on.
//   - Tokens. The token counter is written in the same unit as the claims
//     that use it, so a token is persisted exactly when a claim holding it
//     is; tokens burned by a failed unit are skipped, never reused.
//
// Reads (Get, replays) never go through the committer.

// maxGroup bounds the ops applied in one transaction.
const maxGroup = 256

// unit is one group: the ops run in one transaction, committed together.
type unit struct {
	seq     uint64
	state   int         // how the syncer left it, for the applier
	txn     *badger.Txn // nil until the first op runs
	ops     []op
	results []error
	bufs    []*wtxn             // the writes of each op that wrote, else nil
	written map[string]struct{} // keys written by the ops in txn
}

// overlayEntry is a write of a unit handed to the syncer and not yet
// committed to Badger. Several units in the pipeline may have written one
// key: the latest write is in the overlay, and older ones still pending
// hang from it, newest first, for readers that must not see the latest
// before it is durable.
type overlayEntry struct {
	val       []byte
	del       bool
	expiresAt uint64 // Badger's TTL, unix seconds; 0 for none
	seq       uint64
	older     *overlayEntry
}

// wtxn is what an op sees: reads through its unit, writes buffered until
// the op succeeds, so that a failed op writes nothing.
type wtxn struct {
	b     *BadgerBackend
	u     *unit
	ents  []walEntry // the buffered writes, in order
	keys  []string   // ents' keys as strings, once the op is kept
	after []func()
}

// onCommit arranges for fn to run once the op's writes are committed, in
// commit order, before the op is answered; it never runs if the commit
// fails.
func (w *wtxn) onCommit(fn func()) { w.after = append(w.after, fn) }

// record reads the record of id as the op's turn sees it: the writes of
// the ops before it in its unit, then those of the unit being synced, then
// Badger.
func (w *wtxn) record(id []byte) (*Record, error) {
	key := withPrefix(prefixRecord, id)
	if _, mine := w.u.written[string(key)]; !mine {
		if e, ok := w.b.overlay[string(key)]; ok {
			return overlayRecord(e)
		}
		// Not written by a unit still in the pipeline: an open claim's
		// last write is durable, its hooks have run (finish), and it is
		// what Badger holds.
		if v := w.b.openRecord(id); v != nil {
			return UnmarshalRecord(v)
		}
	}
	return getRecord(w.u.txn, id)
}

// Set buffers a write.
func (w *wtxn) Set(key, value []byte) error {
	w.ents = append(w.ents, walEntry{key: key, val: value})
	return nil
}

// SetEntry buffers a write with its expiry.
func (w *wtxn) SetEntry(e *badger.Entry) error {
	w.ents = append(w.ents, walEntry{key: e.Key, val: e.Value, expiresAt: e.ExpiresAt})
	return nil
}

// SetTTL buffers a write that Badger drops ttl from now, as
// badger.Entry.WithTTL sets it.
func (w *wtxn) SetTTL(key, value []byte, ttl time.Duration) error {
	w.ents = append(w.ents, walEntry{key: key, val: value, expiresAt: uint64(time.Now().Add(ttl).Unix())})
	return nil
}

// Delete buffers a deletion.
func (w *wtxn) Delete(key []byte) error {
	w.ents = append(w.ents, walEntry{key: key, del: true})
	return nil
}

// each calls fn for every buffered write, in order; val is nil for a
// deletion.
func (w *wtxn) each(fn func(key, val []byte, del bool, expiresAt uint64)) {
	for _, e := range w.ents {
		fn(e.key, e.val, e.del, e.expiresAt)
	}
}

type op struct {
	fn   func(w *wtxn) error
	done chan error
}

// batch runs fn as one op of the next group and returns once the group is
// committed (and, under Durable, synced). fn may return errNoWrite to end
// without writing; its other errors are returned as they are.
func (b *BadgerBackend) batch(fn func(w *wtxn) error) error {
	if b.ro {
		return fmt.Errorf("%w: store opened read-only", ErrUnavailable)
	}
	o := op{fn: fn, done: make(chan error, 1)}
	select {
	case b.ops <- o:
	case <-b.stopped:
		return ErrClosed
	}
	select {
	case err := <-o.done:
		return err
	case <-b.committerDone:
		// The committer stopped; it may still have answered this op.
		select {
		case err := <-o.done:
			return err
		default:
			return ErrClosed
		}
	}
}

// pipe is the committer's end of the pipeline: the syncer's handshake and
// the applier's queue. Only the committer uses it.
type pipe struct {
	ready   chan struct{} // the syncer is free and waits for a unit
	units   chan *unit
	applied chan *unit // to the applier, in order
	quit    chan struct{}
	// idle is true once the committer took ready: the syncer waits for
	// a unit.
	idle                    bool
	syncerDone, applierDone chan struct{}
}

// startPipe starts the syncer and the applier.
func (b *BadgerBackend) startPipe() *pipe {
	p := &pipe{ready: make(chan struct{}), units: make(chan *unit), applied: make(chan *unit, applyDepth),
		quit: make(chan struct{}), syncerDone: make(chan struct{}), applierDone: make(chan struct{})}
	go b.syncer(p)
	go b.applier(p.applied, p.applierDone)
	return p
}

// send hands u to the syncer, once it is free.
func (p *pipe) send(u *unit) {
	if !p.idle {
		<-p.ready
	}
	p.idle = false
	p.units <- u
}

// waitIdle waits until the syncer is free.
func (p *pipe) waitIdle() {
	if !p.idle {
		<-p.ready
		p.idle = true
	}
}

// stop stops the syncer and then the applier, once they finished the
// units they were given.
func (p *pipe) stop() {
	close(p.quit)
	<-p.syncerDone
	close(p.applied)
	<-p.applierDone
}

// committer runs ops into the current unit and hands the unit to the
// syncer whenever the syncer is free, until stop is closed. It never logs a
// unit itself: while the syncer writes one, it runs the ops of the next.
func (b *BadgerBackend) committer() {
	defer close(b.committerDone)
	p := b.startPipe()
	defer p.stop()
	cur := &unit{}
	handOver := func() {
		// Run what queued up while the syncer worked: the unit grows with
		// the load, and so do the ops per sync.
	drain:
		for len(cur.ops) < maxGroup {
			select {
			case o := <-b.ops:
				cur = b.run(cur, o, p)
			default:
				break drain
			}
		}
		p.send(b.seal(cur))
		cur = &unit{}
	}
	for {
		switch {
		case len(cur.ops) == 0:
			select {
			case o := <-b.ops:
				cur = b.run(cur, o, p)
			case <-b.stopped:
				return
			}
		case len(cur.ops) >= maxGroup:
			p.waitIdle()
			handOver()
		default:
			select {
			case <-p.ready:
				p.idle = true
				handOver()
			case o := <-b.ops:
				cur = b.run(cur, o, p)
			case <-b.stopped:
				p.send(b.seal(cur))
				return
			}
		}
	}
}

// run runs one op in u and returns the unit that the next op joins: u, or
// a new one if u outgrew a transaction and was handed over (which waits
// for the syncer).
func (b *BadgerBackend) run(u *unit, o op, p *pipe) *unit {
	if err := b.brokenErr(); err != nil {
		o.done <- err
		return u
	}
	if u.txn == nil {
		b.retire()
		u.txn = b.db.NewTransaction(true)
		u.written = map[string]struct{}{}
	}
	w := &wtxn{b: b, u: u}
	err := o.fn(w)
	if errors.Is(err, errNoWrite) {
		err = nil
	}
	if err != nil || len(w.ents) == 0 {
		u.add(o, err, nil)
		return u
	}
	err = apply(u.txn, w)
	if err == nil {
		u.add(o, nil, w)
		return u
	}
	// The op's writes are partly in the transaction: rebuild it from the
	// others. Nothing of this unit was committed, so what they read holds.
	u.txn.Discard()
	u.txn = b.db.NewTransaction(true)
	for _, bw := range u.bufs {
		if bw == nil {
			continue
		}
		if rerr := apply(u.txn, bw); rerr != nil {
			// What fit before must fit again; if not, give up the unit's
			// writes.
			u.txn.Discard()
			u.txn = b.db.NewTransaction(true)
			for k, w := range u.bufs {
				if w != nil {
					u.results[k], u.bufs[k] = unavailable("commit", rerr), nil
				}
			}
			break
		}
	}
	if !errors.Is(err, badger.ErrTxnTooBig) || len(u.ops) == 0 {
		u.add(o, unavailable("commit", err), nil)
		return u
	}
	// Too big beside the others: hand them over, then give this op a
	// transaction of its own.
	p.send(b.seal(u))
	n := &unit{}
	b.retire()
	n.txn = b.db.NewTransaction(true)
	n.written = map[string]struct{}{}
	if err := apply(n.txn, w); err != nil {
		n.txn.Discard()
		n.txn = b.db.NewTransaction(true)
		n.add(o, unavailable("commit", err), nil)
		return n
	}
	n.add(o, nil, w)
	return n
}

func (u *unit) add(o op, err error, w *wtxn) {
	u.ops = append(u.ops, o)
	u.results = append(u.results, err)
	u.bufs = append(u.bufs, w)
	if w != nil {
		w.keys = make([]string, len(w.ents))
		for i, e := range w.ents {
			w.keys[i] = string(e.key)
			u.written[w.keys[i]] = struct{}{}
		}
	}
}

// seal numbers u and puts its writes in the overlay, where the ops of the
// next units read them until the syncer has committed u.
func (b *BadgerBackend) seal(u *unit) *unit {
	b.seq++
	u.seq = b.seq
	b.overlayMu.Lock()
	defer b.overlayMu.Unlock()
	if b.overlay == nil {
		b.overlay = map[string]overlayEntry{}
	}
	for _, w := range u.bufs {
		if w == nil {
			continue
		}
		for i, we := range w.ents {
			k := w.keys[i]
			e := overlayEntry{val: we.val, del: we.del, expiresAt: we.expiresAt, seq: u.seq}
			if prev, ok := b.overlay[k]; ok {
				if prev.seq == u.seq {
					e.older = prev.older // a later op of the same unit
				} else {
					e.older = &prev
				}
			}
			b.overlay[k] = e
			b.sealed = append(b.sealed, sealedKey{k, u.seq})
		}
	}
	return u
}

type sealedKey struct {
	key string
	seq uint64
}

// retire drops from the overlay the writes of units the syncer has
// finished: a transaction begun after this reads them from Badger. It runs
// before every new transaction, and only then, so that a transaction never
// misses a write that is in neither its snapshot nor the overlay.
func (b *BadgerBackend) retire() {
	done := b.retired.Load()
	if len(b.sealed) == 0 || b.sealed[0].seq > done {
		return
	}
	b.overlayMu.Lock()
	defer b.overlayMu.Unlock()
	i := 0
	for ; i < len(b.sealed) && b.sealed[i].seq <= done; i++ {
		k := b.sealed[i]
		e, ok := b.overlay[k.key]
		switch {
		case !ok:
		case e.seq <= done:
			delete(b.overlay, k.key)
		default:
			// A later unit wrote the key again: drop the older writes
			// that Badger now holds.
			for n := &e; n.older != nil; n = n.older {
				if n.older.seq <= done {
					n.older = nil
					break
				}
			}
			b.overlay[k.key] = e
		}
	}
	if i > 0 {
		b.sealed = append(b.sealed[:0], b.sealed[i:]...)
	}
}

// applyDepth bounds the units synced to the log and waiting for their
// Badger commit: past it, the syncer waits for the applier.
const applyDepth = 8

// syncer finishes the units the committer hands it, one at a time: it
// asks for the next by sending on ready. It hands every unit on to the
// applier, in order, once its ops are answered.
func (b *BadgerBackend) syncer(p *pipe) {
	defer close(p.syncerDone)
	for {
		select {
		case p.ready <- struct{}{}:
			select {
			case u := <-p.units:
				b.finish(u, p.applied)
			case <-p.quit:
				return
			}
		case <-p.quit:
			return
		}
	}
}

// finish makes u durable and answers its ops: the log frame and its sync
// (Durable), or the Badger commit (Fast), then the ops' onCommit hooks in
// order. Under Durable the applier commits u to Badger afterwards, while
// the ops' callers go on and the syncer logs the next unit. If any step
// fails, the store stops writing until it is reopened (brokenErr): later
// units read u's writes from the overlay, so they cannot go on as if u
// had not been.
func (b *BadgerBackend) finish(u *unit, applied chan<- *unit) {
	fail := func(err error) {
		// Nothing of u is durable or answered: readers never look at its
		// overlay entries, and the applier lets the committer retire them.
		u.state = unitFailed
		for i := range u.ops {
			if u.results[i] == nil || u.bufs[i] != nil {
				u.results[i] = err
			}
			u.ops[i].done <- u.results[i]
		}
		applied <- u
	}
	if err := b.brokenErr(); err != nil {
		fail(err)
		return
	}
	wrote := false
	for _, w := range u.bufs {
		wrote = wrote || w != nil
	}
	switch {
	case !wrote:
		u.state = unitEmpty
	case b.wal == nil:
		// Fast: a write counts once Badger holds it.
		if err := u.txn.Commit(); err != nil {
			fail(b.breakWith(fmt.Errorf("commit: %w", err)))
			return
		}
		u.state = unitCommitted
	default:
		if b.testLog != nil {
			b.testLog(u.seq)
		}
		if err := b.logUnit(u); err != nil {
			fail(b.breakWith(err))
			return
		}
		// Durable once synced: answer now, and let the applier commit to
		// Badger. Until it does, readers find the unit's writes in the
		// overlay (durableWrite).
		b.durable.Store(u.seq)
		u.state = unitLogged
	}
	// The hooks run before the applier may commit u: once it has, the
	// committer no longer finds u's writes in the overlay, and reads an
	// open claim's record from what the hooks left (wtxn.record).
	b.hooks(u)
	// A goroutine woken last runs first on this processor. A lone caller
	// is woken after the applier, so that it goes on before the Badger
	// commit; a group's callers are woken first, so that none of them
	// waits for the wake-up of the applier.
	if len(u.ops) == 1 {
		applied <- u
		b.wake(u)
		return
	}
	b.wake(u)
	applied <- u
}

// The states in which the syncer hands a unit to the applier.
const (
	unitFailed    = iota + 1 // nothing of it holds; its ops got the error
	unitEmpty                // it wrote nothing
	unitCommitted            // Badger holds it (Fast)
	unitLogged               // durable in the log, to commit to Badger
)

// applier commits logged units to Badger in the order they were synced,
// and marks each unit retired once Badger holds it (or once nothing of it
// is to hold), in order, so that the committer drops a unit's writes from
// the overlay only when a transaction begun afterwards reads them from
// Badger. After a failed commit it commits nothing more and retires
// nothing: readers keep finding the durable writes in the overlay, and
// the log holds them for the reopen.
func (b *BadgerBackend) applier(units <-chan *unit, done chan<- struct{}) {
	defer close(done)
	stuck := false // a logged unit is not in Badger: retire nothing more
	for u := range units {
		switch {
		case u.state == unitLogged && !stuck && b.brokenErr() == nil:
			if b.testApply != nil {
				b.testApply(u.seq)
			}
			if err := u.txn.Commit(); err != nil {
				b.breakWith(fmt.Errorf("commit: %w", err))
				stuck = true
			}
		case u.state == unitLogged:
			u.txn.Discard()
			stuck = true
		case u.state != unitCommitted && u.txn != nil:
			u.txn.Discard()
		}
		if !stuck {
			b.retired.Store(u.seq)
		}
		b.settled()
	}
}

// waitApplied waits until Badger holds every unit synced to the log, or
// returns the error that stopped writing.
func (b *BadgerBackend) waitApplied() error {
	b.settle()
	return b.brokenErr()
}

// settle waits until Badger holds every answered write, for readers that
// scan Badger (Scan, Stale, the expiry index) rather than look up one key.
// It waits for at most one commit; once writing stopped, it does not wait.
func (b *BadgerBackend) settle() {
	d := b.durable.Load()
	if d <= b.retired.Load() {
		return
	}
	b.settleMu.Lock()
	for b.retired.Load() < d && b.brokenErr() == nil {
		b.settleCond.Wait()
	}
	b.settleMu.Unlock()
}

// settled wakes the readers waiting in settle.
func (b *BadgerBackend) settled() {
	b.settleMu.Lock()
	b.settleCond.Broadcast()
	b.settleMu.Unlock()
}

// hooks runs the onCommit hooks of u's ops, in order.
func (b *BadgerBackend) hooks(u *unit) {
	for _, w := range u.bufs {
		if w != nil {
			for _, fn := range w.after {
				fn()
			}
		}
	}
}

// wake answers u's ops.
func (b *BadgerBackend) wake(u *unit) {
	for i, o := range u.ops {
		o.done <- u.results[i]
	}
}

// durableWrite returns the latest write of key if it is durable in the log
// but not yet committed to Badger: readers outside the committer must see
// what an answered op wrote, and must not see what is not yet durable.
func (b *BadgerBackend) durableWrite(key []byte) (overlayEntry, bool) {
	if b.wal == nil {
		return overlayEntry{}, false
	}
	d := b.durable.Load()
	if d <= b.retired.Load() {
		return overlayEntry{}, false // every durable unit is in Badger
	}
	b.overlayMu.RLock()
	defer b.overlayMu.RUnlock()
	e, ok := b.overlay[string(key)]
	for ok && e.seq > d {
		if e.older == nil {
			return overlayEntry{}, false
		}
		e = *e.older
	}
	return e, ok
}

// overlayRecord decodes an overlay write of a record as Badger would
// answer for it once committed.
func overlayRecord(e overlayEntry) (*Record, error) {
	if e.del || (e.expiresAt != 0 && e.expiresAt <= uint64(time.Now().Unix())) {
		return nil, nil
	}
	return UnmarshalRecord(e.val)
}

// breakWith records the failure that stops writing, and returns the error
// ops get from now on.
func (b *BadgerBackend) breakWith(err error) error {
	b.brokenMu.Lock()
	defer b.brokenMu.Unlock()
	if b.broken == nil {
		b.broken = unavailable("commit", fmt.Errorf("a commit failed; reopen the store to recover: %w", err))
	}
	return b.broken
}

// brokenErr returns the error that stopped writing, if any.
func (b *BadgerBackend) brokenErr() error {
	b.brokenMu.Lock()
	defer b.brokenMu.Unlock()
	return b.broken
}

// logUnit makes the writes of u durable in the log (wal.go) before its
// transaction is committed: one frame, one sync.
func (b *BadgerBackend) logUnit(u *unit) error {
	w := b.wal
	if w == nil {
		return nil
	}
	w.begin()
	for _, t := range u.bufs {
		if t != nil {
			w.add(t)
		}
	}
	if w.full() {
		// The log may start afresh only once Badger holds, and has
		// synced, everything logged so far.
		if err := b.waitApplied(); err != nil {
			return err
		}
		if err := b.checkpoint(); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
	}
	if err := w.commit(); err != nil {
		return fmt.Errorf("log write: %w", err)
	}
	return nil
}

// checkpoint makes everything Badger holds durable in its own files, then
// starts a new generation of the log. It runs on the syncer, or at open
// and Close when the committer is not running.
func (b *BadgerBackend) checkpoint() error {
	if err := syncBadgerFiles(b.db, b.dir); err != nil {
		return err
	}
	return b.wal.reset()
}

// apply writes an op's buffered writes into txn, in order, as fresh
// entries (an entry given to a discarded transaction is not reused).
func apply(txn *badger.Txn, w *wtxn) error {
	for _, e := range w.ents {
		if err := setEntry(txn, e); err != nil {
			return err
		}
	}
	return nil
}
