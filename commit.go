package idem

import (
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"
)

// Group commit for the Badger backend.
//
// Badger syncs its log once per write request, and every transaction
// commit is one request: a store that commits each claim on its own is
// bound to the disk's sync rate, shared by every goroutine. So every
// read-modify-write of the backend runs as an op on one committer
// goroutine, which gathers the ops that arrived while the previous commit
// was syncing and applies them all in one transaction: one request, one
// sync, for the whole group.
//
// Why this keeps the contract:
//
//   - Atomic claims. Ops run one at a time, each reading through the
//     group's transaction, which sees the writes of the ops before it in the
//     group as well as every earlier group (each group is committed before
//     the next starts). Two claims of one key in one group: the second
//     reads the first's pending record and does not claim. The committer is
//     the only writer of records (Badger's directory lock keeps other
//     processes out), so no write can slip between an op's read and its
//     write, and Badger's conflict detection has nothing left to catch.
//   - Durability. Under Durable, the group's writes are framed into the
//     store's log and synced (wal.go) before the transaction is committed,
//     and no op is acknowledged before that. A claim is thus durable before
//     its effect runs and a result before its caller hears of it, exactly
//     as with one synced commit per op. Nothing rides on a later sync, and
//     no reader sees a write that is not yet durable.
//   - Failure. If the group's commit fails, every op in it gets the error
//     (wrapping ErrUnavailable) and none of its in-memory side effects (the
//     open-claim set) are applied: the caller was told nothing was stored.
//   - Tokens. The token counter is written in the same group as the claims
//     that use it, so a token is persisted exactly when a claim holding it
//     is; tokens burned by a failed group are skipped, never reused.
//
// Reads (Get, replays) never go through the committer.

// maxGroup bounds the ops applied in one transaction.
const maxGroup = 256

// wtxn is what an op sees: reads through the group's transaction, writes
// buffered until the op succeeds, so that a failed op writes nothing.
type wtxn struct {
	txn    *badger.Txn
	writes []*badger.Entry
	dels   [][]byte
	order  []bool // true: next entry of writes; false: next of dels
	after  []func()
}

// onCommit arranges for fn to run on the committer once the op's writes
// are committed, in commit order; it never runs if the commit fails.
func (w *wtxn) onCommit(fn func()) { w.after = append(w.after, fn) }

// Get reads key as the group sees it.
func (w *wtxn) Get(key []byte) (*badger.Item, error) { return w.txn.Get(key) }

// Set buffers a write.
func (w *wtxn) Set(key, value []byte) error { return w.SetEntry(badger.NewEntry(key, value)) }

// SetEntry buffers a write.
func (w *wtxn) SetEntry(e *badger.Entry) error {
	w.writes = append(w.writes, e)
	w.order = append(w.order, true)
	return nil
}

// Delete buffers a deletion.
func (w *wtxn) Delete(key []byte) error {
	w.dels = append(w.dels, key)
	w.order = append(w.order, false)
	return nil
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

// committer runs groups of ops until stop is closed.
func (b *BadgerBackend) committer() {
	defer close(b.committerDone)
	group := make([]op, 0, maxGroup)
	for {
		select {
		case o := <-b.ops:
			group = append(group[:0], o)
		case <-b.stopped:
			return
		}
	gather:
		for len(group) < maxGroup {
			select {
			case o := <-b.ops:
				group = append(group, o)
			default:
				break gather
			}
		}
		b.commitGroup(group)
	}
}

// commitGroup applies the ops of one group in one transaction (or a few,
// if the group outgrows a transaction) and tells each op how it ended.
func (b *BadgerBackend) commitGroup(group []op) {
	if b.walBroken != nil {
		err := unavailable("commit", fmt.Errorf("the store's log failed earlier; reopen the store to recover: %w",
			b.walBroken))
		for _, o := range group {
			o.done <- err
		}
		return
	}
	results := make([]error, len(group))
	bufs := make([]*wtxn, len(group))
	txn := b.db.NewTransaction(true)
	// pending holds the ops whose writes are in txn, not yet committed;
	// readers the ops that answered from a txn holding such writes. If the
	// commit fails, both learn it: nobody is answered from state that was
	// never stored.
	var pending, readers []int
	commit := func() {
		if err := b.logGroup(pending, bufs); err != nil {
			txn.Discard()
			for _, i := range append(pending, readers...) {
				results[i] = err
			}
			pending, readers = pending[:0], readers[:0]
			txn = b.db.NewTransaction(true)
			return
		}
		if err := txn.Commit(); err != nil {
			if b.wal != nil {
				// The group is durable in the log but not in Badger: later
				// groups would read around it while a replay would apply it.
				// Stop writing until a reopen replays the log.
				b.walBroken = fmt.Errorf("commit after the log was synced: %w", err)
			}
			for _, i := range append(pending, readers...) {
				results[i] = unavailable("commit", err)
			}
		} else {
			for _, i := range pending {
				if results[i] == nil {
					for _, fn := range bufs[i].after {
						fn()
					}
				}
			}
		}
		pending, readers = pending[:0], readers[:0]
		txn = b.db.NewTransaction(true)
	}
	for i, o := range group {
		w := &wtxn{txn: txn}
		err := o.fn(w)
		if errors.Is(err, errNoWrite) {
			err = nil
		}
		if err != nil || len(w.order) == 0 {
			results[i] = err
			if len(pending) > 0 {
				readers = append(readers, i)
			}
			continue
		}
		bufs[i] = w
		if err := apply(txn, w); err != nil {
			// The op's writes are partly in txn: drop txn and rebuild it
			// from the others. Nothing was committed in between, so what
			// every op read still holds.
			txn.Discard()
			txn = b.db.NewTransaction(true)
			for _, j := range pending {
				if err := apply(txn, bufs[j]); err != nil {
					results[j] = unavailable("commit", err)
				}
			}
			if !errors.Is(err, badger.ErrTxnTooBig) {
				results[i] = unavailable("commit", err)
				continue
			}
			// Too big beside the others: commit them, then give this op a
			// transaction of its own.
			commit()
			if err := apply(txn, w); err != nil {
				txn.Discard()
				txn = b.db.NewTransaction(true)
				results[i] = unavailable("commit", err)
				continue
			}
		}
		pending = append(pending, i)
	}
	if len(pending) > 0 {
		commit()
	}
	txn.Discard()
	for i, o := range group {
		o.done <- results[i]
	}
}

// logGroup makes the writes of the pending ops durable in the log (wal.go)
// before their transaction is committed: one frame, one sync. Any failure
// stops all writing until a reopen, since the log may or may not hold the
// frame and the generation on disk may not be the one in memory.
func (b *BadgerBackend) logGroup(pending []int, bufs []*wtxn) error {
	if b.wal == nil || len(pending) == 0 {
		return nil
	}
	w := b.wal
	w.begin()
	for _, i := range pending {
		w.add(bufs[i])
	}
	if w.full() {
		if err := b.checkpoint(); err != nil {
			b.walBroken = fmt.Errorf("checkpoint: %w", err)
			return unavailable("commit", b.walBroken)
		}
	}
	if err := w.commit(); err != nil {
		b.walBroken = fmt.Errorf("log write: %w", err)
		return unavailable("commit", b.walBroken)
	}
	return nil
}

// checkpoint makes everything Badger holds durable in its own files, then
// starts a new generation of the log. It runs on the committer, or at open
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
	wi, di := 0, 0
	for _, isWrite := range w.order {
		var err error
		if isWrite {
			e := w.writes[wi]
			wi++
			ne := badger.NewEntry(e.Key, e.Value)
			ne.ExpiresAt = e.ExpiresAt
			err = txn.SetEntry(ne)
		} else {
			err = txn.Delete(w.dels[di])
			di++
		}
		if err != nil {
			return err
		}
	}
	return nil
}
