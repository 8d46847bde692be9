package engine

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/idemkit/idem/internal/badger"
	"github.com/idemkit/idem/internal/wal"
)

// maxGroup bounds the ops applied in one transaction.
const maxGroup = 256

// loneStreak is how many lone units in a row make the committer offer
// its role to the next caller (alone): one op at a time is then the
// load, not a lull between groups.
const loneStreak = 4

// applyDepth bounds the units synced to the log and waiting for their
// Badger commit: past it, the syncer waits for the applier.
const applyDepth = 8

// lazyUnits is how many lone units may wait for the applier before the
// one handing the next over wakes it (handApplier).
const lazyUnits = 4

// unit is one group: the ops run on one snapshot, and their writes are
// committed together.
type unit struct {
	seq   uint64
	state int // how the syncer left it, for the applier
	// txn is the snapshot the ops read, nil until the first op runs; ws
	// holds their writes, committed as one Badger transaction.
	txn     *badger.Txn
	ws      *badger.WriteSet
	ops     []op
	results []error
	bufs    []*Txn                // the writes of each op that wrote, else nil
	written map[string]*wal.Entry // the last write of each key the ops wrote
	// base is the retired unit as txn began: every unit after it that
	// wrote a key is found in the pending index (Txn.ReadAfter).
	base uint64
}

// wrote returns the last write of key by an op of u, if any.
func (u *unit) wrote(key []byte) (*wal.Entry, bool) {
	w, ok := u.written[string(key)]
	return w, ok
}

// discard gives up u's snapshot and writes.
func (u *unit) discard() {
	u.txn = nil // the engine's shared transaction: not discarded
	if u.ws != nil {
		u.ws.Reset()
		writeSets.Put(u.ws)
		u.ws = nil
	}
}

// writeSets holds the write sets of units that Badger committed or
// dropped, for the next units: a write set keeps its memory.
var writeSets sync.Pool

// units holds units the applier is done with, and txns their ops'
// Txns, for the next ones: a unit keeps its slices and its map of
// written keys, a Txn its room for a usual op's writes.
var (
	units = sync.Pool{New: func() any { return &unit{} }}
	txns  = sync.Pool{New: func() any { return &Txn{} }}
)

// newUnit returns an empty unit.
func newUnit() *unit { return units.Get().(*unit) }

// recycle puts u, which the applier is done with, and its ops' Txns back
// for reuse. Nothing refers to them any more: the ops were answered, their
// hooks ran, Badger holds or dropped their writes, and the pending index
// keeps only their keys' strings and their values, which are the ops' own.
func (u *unit) recycle() {
	for _, t := range u.bufs {
		if t != nil {
			t.recycle()
		}
	}
	clear(u.ops)
	clear(u.results)
	clear(u.bufs)
	clear(u.written)
	*u = unit{ops: u.ops[:0], results: u.results[:0], bufs: u.bufs[:0], written: u.written}
	units.Put(u)
}

type op struct {
	fn   func(t *Txn) error
	done chan error
}

// Update runs fn as one op of the next unit and returns once the unit is
// durable (Durable) or in Badger (Fast). fn may return ErrNoWrite to end
// without writing; its other errors are returned as they are, and its
// writes dropped.
func (e *Engine) Update(fn func(t *Txn) error) error {
	if e.ro {
		return ErrReadOnly
	}
	select {
	case <-e.role:
		return e.alone(fn)
	default:
	}
	o := op{fn: fn, done: doneChans.Get().(chan error)}
	select {
	case e.ops <- o:
	case <-e.stopped:
		doneChans.Put(o.done)
		return ErrClosed
	}
	select {
	case err := <-o.done:
		doneChans.Put(o.done)
		return err
	case <-e.committerDone:
		// The committer stopped; it may still have answered this op.
		select {
		case err := <-o.done:
			doneChans.Put(o.done)
			return err
		default:
			// Never reused: an answer may still come.
			return ErrClosed
		}
	}
}

// doneChans holds ops' answer channels for reuse. Every op is answered
// exactly once, so a channel whose answer was received is empty and
// nothing more is sent on it; one whose answer may still come (an op left
// when the committer stopped) is dropped, never put back.
var doneChans = sync.Pool{New: func() any { return make(chan error, 1) }}

// alone runs fn as a unit of its own on the caller's goroutine, holding
// the committer's role, which the committer offers once a lone unit is
// done and nothing else is in flight: the unit is logged and answered as
// the syncer would, with no goroutine woken on its way (docs/engine.md,
// "A lone caller"). Ops that arrive meanwhile queue for the committer,
// which takes the role back once fn's unit is answered.
//
// A panic on the committer would end the process. Here it may be
// recovered up the caller's stack, so it first breaks the engine (every
// later write fails until a reopen, which replays whatever the log holds)
// and discards the unit's transaction unless the applier has it; then it
// goes on up.
func (e *Engine) alone(fn func(t *Txn) error) error {
	u, handed := newUnit(), false
	defer func() {
		if r := recover(); r != nil {
			e.breakWith(fmt.Errorf("an op panicked: %v", r))
			if !handed {
				u.discard()
			}
			e.role <- struct{}{}
			panic(r)
		}
		e.role <- struct{}{}
	}()
	select {
	case <-e.stopped:
		return ErrClosed
	default:
	}
	o := op{fn: fn, done: doneChans.Get().(chan error)}
	e.run(u, o, e.pipe) // a fresh unit is never handed over: u stays
	if len(u.ops) > 0 {
		e.finish(e.seal(u), e.pipe)
		handed = true
	}
	err := <-o.done
	doneChans.Put(o.done)
	return err
}

// pipe is the committer's end of the pipeline: the syncer's handshake and
// the applier's queue. Only the committer uses it, or a caller holding
// its role (alone), which hands its unit to the applier.
type pipe struct {
	e       *Engine
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
func (e *Engine) startPipe() *pipe {
	p := &pipe{e: e, ready: make(chan struct{}), units: make(chan *unit), applied: make(chan *unit, applyDepth),
		quit: make(chan struct{}), syncerDone: make(chan struct{}), applierDone: make(chan struct{})}
	go e.syncer(p)
	go e.applier(p.applied, p.applierDone)
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
	p.e.wakeApplier()
	<-p.applierDone
}

// committer runs ops into the current unit and hands the unit to the
// syncer whenever the syncer is free, until stopped is closed: while the
// syncer logs one unit, the next fills with the ops that arrive.
func (e *Engine) committer() {
	defer close(e.committerDone)
	p := e.startPipe()
	e.pipe = p
	defer p.stop()
	cur := newUnit()
	handOver := func() {
		// Run what queued up while the syncer worked: the unit grows with
		// the load, and so do the ops per sync.
	drain:
		for len(cur.ops) < maxGroup {
			select {
			case o := <-e.ops:
				cur = e.run(cur, o, p)
			default:
				break drain
			}
		}
		p.send(e.seal(cur))
		cur = newUnit()
	}
	for {
		switch {
		case len(cur.ops) == 0 && p.idle && e.lone >= loneStreak:
			// Nothing in flight, and the load is one op at a time: let
			// the next caller run its op alone.
			e.role <- struct{}{}
			select {
			case o := <-e.ops:
				<-e.role
				cur = e.run(cur, o, p)
			case <-e.stopped:
				<-e.role
				return
			}
		case len(cur.ops) == 0:
			// Under a lone load, wait for the syncer too, to offer the
			// role once it is free; otherwise it waits to be given a unit.
			var ready chan struct{}
			if !p.idle && e.lone >= loneStreak {
				ready = p.ready
			}
			select {
			case o := <-e.ops:
				cur = e.run(cur, o, p)
			case <-ready:
				p.idle = true
			case <-e.stopped:
				return
			}
		case p.idle:
			// The syncer waits already (it went idle before the op came).
			handOver()
		case len(cur.ops) >= maxGroup:
			p.waitIdle()
			handOver()
		default:
			select {
			case <-p.ready:
				p.idle = true
				handOver()
			case o := <-e.ops:
				cur = e.run(cur, o, p)
			case <-e.stopped:
				p.send(e.seal(cur))
				return
			}
		}
	}
}

// begin gives u a fresh read transaction and write set, after retiring
// what Badger holds.
//
// The transaction has no snapshot: it reads each key's newest version in
// Badger (badger.DB.NewTransactionLatest), so it neither waits for the
// applier's commit in progress nor takes a read timestamp. The ops read
// the same as from a snapshot taken now: a key they read from Badger was
// written by no unit in the pending index, and every unit that leaves the
// index until the next begin stays in it for the committer (retire runs
// only here), so the key's newest version in Badger is the one it has now.
func (e *Engine) begin(u *unit) {
	e.retire()
	// Loaded after retire: no write of a unit after base has left the
	// pending index.
	u.base = e.retired.Load()
	u.txn = e.latest
	u.ws = e.writeSet()
	if u.written == nil {
		u.written = map[string]*wal.Entry{}
	}
}

// writeSet returns an empty write set of e's Badger.
func (e *Engine) writeSet() *badger.WriteSet {
	if ws, ok := writeSets.Get().(*badger.WriteSet); ok && ws.DB() == e.db {
		return ws
	}
	return e.db.NewWriteSet()
}

// run runs one op in u and returns the unit that the next op joins: u, or
// a new one if u outgrew a transaction and was handed over (which waits
// for the syncer).
func (e *Engine) run(u *unit, o op, p *pipe) *unit {
	if err := e.brokenErr(); err != nil {
		o.done <- err
		return u
	}
	if u.txn == nil {
		e.begin(u)
	}
	t := newTxn(e, u)
	err := o.fn(t)
	if errors.Is(err, ErrNoWrite) {
		err, t.ents = nil, nil
	}
	if err != nil || len(t.ents) == 0 {
		t.recycle() // its writes and hooks are dropped
		u.add(o, err, nil)
		return u
	}
	err = apply(u.ws, t)
	if err == nil {
		u.add(o, nil, t)
		return u
	}
	if !errors.Is(err, badger.ErrTxnTooBig) || len(u.ops) == 0 {
		u.add(o, fmt.Errorf("commit: %w", err), nil)
		return u
	}
	// Too big beside the others: hand them over, then give this op a
	// transaction of its own.
	p.send(e.seal(u))
	n := newUnit()
	e.begin(n)
	if err := apply(n.ws, t); err != nil {
		n.add(o, fmt.Errorf("commit: %w", err), nil)
		return n
	}
	n.add(o, nil, t)
	return n
}

func (u *unit) add(o op, err error, t *Txn) {
	u.ops = append(u.ops, o)
	u.results = append(u.results, err)
	u.bufs = append(u.bufs, t)
	if t != nil {
		// The keys as strings, for the pending index, cut from one
		// string: one allocation per op rather than one per write.
		n := 0
		for _, e := range t.ents {
			n += len(e.Key)
		}
		var b strings.Builder
		b.Grow(n)
		for _, e := range t.ents {
			b.Write(e.Key)
		}
		all := b.String()
		t.keys = t.keyBuf[:0]
		if len(t.ents) > len(t.keyBuf) {
			t.keys = make([]string, 0, len(t.ents))
		}
		t.keys = t.keys[:len(t.ents)]
		for i, e := range t.ents {
			t.keys[i], all = all[:len(e.Key)], all[len(e.Key):]
			u.written[t.keys[i]] = &t.ents[i]
		}
	}
}

// seal numbers u and puts its writes in the pending index, where the ops
// of the next units read them until Badger holds u.
func (e *Engine) seal(u *unit) *unit {
	e.seq++
	u.seq = e.seq
	if len(u.ops) == 1 {
		e.lone++
	} else {
		e.lone = 0
	}
	e.pendingMu.Lock()
	defer e.pendingMu.Unlock()
	if e.pending == nil {
		e.pending = map[string]pendingWrite{}
	}
	for _, t := range u.bufs {
		if t == nil {
			continue
		}
		for i, we := range t.ents {
			k := t.keys[i]
			w := pendingWrite{val: we.Value, del: we.Delete, expiresAt: we.ExpiresAt, seq: u.seq}
			if prev, ok := e.pending[k]; ok {
				if prev.seq == u.seq {
					w.older = prev.older // a later op of the same unit
				} else {
					// A copy on the heap only here: &prev would move
					// every lookup's prev there.
					older := new(pendingWrite)
					*older = prev
					w.older = older
				}
			}
			e.pending[k] = w
			e.sealed = append(e.sealed, sealedKey{k, u.seq})
		}
	}
	return u
}

type sealedKey struct {
	key string
	seq uint64
}

// retire drops from the pending index the writes of units Badger holds: a
// transaction begun after this reads them from Badger. It runs before
// every new transaction, and only then, so that a transaction never
// misses a write that is in neither its snapshot nor the index.
func (e *Engine) retire() {
	done := e.retired.Load()
	if len(e.sealed) == 0 || e.sealed[0].seq > done {
		return
	}
	e.pendingMu.Lock()
	defer e.pendingMu.Unlock()
	i := 0
	for ; i < len(e.sealed) && e.sealed[i].seq <= done; i++ {
		k := e.sealed[i]
		w, ok := e.pending[k.key]
		switch {
		case !ok:
		case w.seq <= done:
			delete(e.pending, k.key)
		default:
			// A later unit wrote the key again: drop the older writes
			// that Badger now holds.
			for n := &w; n.older != nil; n = n.older {
				if n.older.seq <= done {
					n.older = nil
					break
				}
			}
			e.pending[k.key] = w
		}
	}
	if i > 0 {
		e.sealed = append(e.sealed[:0], e.sealed[i:]...)
	}
}

// apply adds an op's buffered writes to ws, in order; if one is refused
// it takes out those it added, and returns the error.
func apply(ws *badger.WriteSet, t *Txn) error {
	n := ws.Len()
	for _, e := range t.ents {
		var err error
		if e.Delete {
			err = ws.Delete(e.Key)
		} else {
			err = ws.Set(e.Key, e.Value, e.ExpiresAt)
		}
		if err != nil {
			ws.Truncate(n)
			return err
		}
	}
	return nil
}

func setEntry(txn *badger.Txn, key, val []byte, del bool, expiresAt uint64) error {
	if del {
		return txn.Delete(key)
	}
	ne := badger.NewEntry(key, val)
	ne.ExpiresAt = expiresAt
	return txn.SetEntry(ne)
}
