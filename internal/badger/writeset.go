/*
 * SPDX-FileCopyrightText: © 2017-2025 Istari Digital, Inc.
 * SPDX-License-Identifier: Apache-2.0
 */

package badger

import (
	"errors"
	"strconv"

	"github.com/idemkit/idem/internal/badger/y"
)

// WriteSet is a set of writes committed together as one transaction, at one
// new commit timestamp: a transaction that begins after Commit returns
// sees all of them, one that began before sees none. Unlike an update Txn
// it keeps no index of its keys: it cannot read its own writes, it does
// not detect conflicts, and adding an entry allocates nothing once the
// write set has grown to its size. Of two writes of one key in a write set the
// later wins. It is for an application that orders its writes itself and
// reads them from its own memory until they are committed (one writer
// goroutine with an index of its pending writes, say), and would
// otherwise pay a transaction's map and copies per write.
//
// A WriteSet is not safe for concurrent use. It keeps a reference to the key
// and value slices it is given until Commit returns or Reset is called:
// they must not change until then. It cannot be used in managed mode.
type WriteSet struct {
	db          *DB
	ents        []Entry
	ptrs        []*Entry
	keys        []byte // the versioned keys of the last commit
	fin         Entry
	finVal      []byte
	count, size int64
}

// NewWriteSet returns an empty WriteSet of db.
func (db *DB) NewWriteSet() *WriteSet {
	w := &WriteSet{db: db}
	w.Reset()
	return w
}

// Set adds a write of val to key; expiresAt is the entry's expiry (unix
// seconds, 0 for none). It returns ErrTxnTooBig, adding nothing, if the
// write set would outgrow what one transaction holds, and the error
// Txn.SetEntry gives for a key or value Badger refuses.
func (w *WriteSet) Set(key, val []byte, expiresAt uint64) error {
	return w.add(Entry{Key: key, Value: val, ExpiresAt: expiresAt})
}

// Delete adds a deletion of key (Set's errors).
func (w *WriteSet) Delete(key []byte) error {
	return w.add(Entry{Key: key, meta: bitDelete})
}

func (w *WriteSet) add(e Entry) error {
	if err := w.db.checkEntry(&e); err != nil {
		return err
	}
	// As Txn.checkSize counts: the key's version, and the transaction's
	// end marker from the start.
	count := w.count + 1
	size := w.size + e.estimateSizeAndSetThreshold(w.db.valueThreshold()) + 10
	if count >= w.db.opt.maxBatchCount || size >= w.db.opt.maxBatchSize {
		return ErrTxnTooBig
	}
	w.count, w.size = count, size
	w.ents = append(w.ents, e)
	return nil
}

// Len returns the number of writes added since the write set was last empty.
func (w *WriteSet) Len() int { return len(w.ents) }

// Truncate drops the writes added after the first n.
func (w *WriteSet) Truncate(n int) {
	if n >= len(w.ents) {
		return
	}
	clear(w.ents[n:])
	w.ents = w.ents[:n]
	w.count, w.size = 1, int64(len(txnKey)+10)
	for i := range w.ents {
		w.count++
		w.size += w.ents[i].estimateSizeAndSetThreshold(w.db.valueThreshold()) + 10
	}
}

// Reset empties the write set, which keeps its memory for the next writes.
func (w *WriteSet) Reset() {
	clear(w.ents)
	w.ents = w.ents[:0]
	// As a Txn starts: one entry and its bytes for the end marker.
	w.count, w.size = 1, int64(len(txnKey)+10)
}

// Commit writes the write set as one transaction and returns once the writes
// are in the memtable (and the value log, for values past the value
// threshold), or failed. As with Txn.Commit, an error means the LSM tree
// holds none of them. Either way the write set is empty afterwards and may be
// used again; an empty write set commits nothing.
func (w *WriteSet) Commit() error {
	defer w.Reset()
	if len(w.ents) == 0 {
		return nil
	}
	db := w.db
	if db.opt.managedTxns {
		return errors.New("WriteSet cannot be used in managed mode")
	}
	if db.pub.noOfSubscribers() != 0 {
		// The publisher reads the entries after Commit returns: hand
		// them over and start afresh.
		defer func() { w.ents, w.ptrs, w.keys, w.finVal = nil, nil, nil, nil }()
	}
	orc := db.orc
	// As Txn.commitAndSend: the commit timestamps reach the write
	// channel in order.
	orc.writeChLock.Lock()
	orc.Lock()
	ts := orc.nextTxnTs
	orc.nextTxnTs++
	orc.txnMark.Begin(ts)
	orc.Unlock()

	size := len(txnKey) + 8
	for i := range w.ents {
		size += len(w.ents[i].Key) + 8
	}
	keys := w.keys[:0]
	if cap(keys) < size {
		keys = make([]byte, 0, size)
	}
	ptrs := w.ptrs[:0]
	for i := range w.ents {
		e := &w.ents[i]
		start := len(keys)
		keys = y.AppendKeyWithTs(keys, e.Key, ts)
		e.Key = keys[start:len(keys):len(keys)]
		e.version = ts
		e.meta |= bitTxn
		ptrs = append(ptrs, e)
	}
	start := len(keys)
	keys = y.AppendKeyWithTs(keys, txnKey, ts)
	w.finVal = strconv.AppendUint(w.finVal[:0], ts, 10)
	w.fin = Entry{Key: keys[start:len(keys):len(keys)], Value: w.finVal, meta: bitFinTxn}
	ptrs = append(ptrs, &w.fin)
	w.keys, w.ptrs = keys, ptrs

	req, err := db.sendToWriteCh(ptrs)
	orc.writeChLock.Unlock()
	if err != nil {
		orc.doneCommit(ts)
		return err
	}
	err = req.Wait()
	orc.doneCommit(ts)
	clear(w.ptrs)
	return err
}

// DB returns the DB the write set writes to.
func (w *WriteSet) DB() *DB { return w.db }
