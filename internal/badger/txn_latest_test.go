//go:build upstream

/*
 * SPDX-FileCopyrightText: © 2017-2025 Istari Digital, Inc.
 * SPDX-License-Identifier: Apache-2.0
 */

package badger

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestNewTransactionLatest holds a commit timestamp handed out and not done,
// as a commit in progress does: NewTransaction waits for it, and
// NewTransactionLatest does not, takes no read timestamp (the read
// watermark does not wait for it) and reads each key's newest version,
// including one committed after it began.
func TestNewTransactionLatest(t *testing.T) {
	runBadgerTest(t, nil, func(t *testing.T, db *DB) {
		set := func(k, v string) {
			require.NoError(t, db.Update(func(txn *Txn) error { return txn.Set([]byte(k), []byte(v)) }))
		}
		get := func(txn *Txn, k string) string {
			item, err := txn.Get([]byte(k))
			require.NoError(t, err)
			v, err := item.ValueCopy(nil)
			require.NoError(t, err)
			return string(v)
		}
		set("k", "v1")

		// A commit in progress: its timestamp is handed out, and its
		// entries are not written yet.
		db.orc.Lock()
		inFlight := db.orc.nextTxnTs
		db.orc.nextTxnTs++
		db.orc.txnMark.Begin(inFlight)
		db.orc.Unlock()

		waited := make(chan struct{})
		go func() {
			txn := db.NewTransaction(false)
			txn.Discard()
			close(waited)
		}()

		txn := db.NewTransactionLatest()
		require.Equal(t, "v1", get(txn, "k"))
		select {
		case <-waited:
			t.Fatal("NewTransaction returned with a commit before its read timestamp in progress")
		case <-time.After(100 * time.Millisecond):
		}
		db.orc.txnMark.Done(inFlight)
		<-waited

		// No snapshot: a commit after it began is read.
		set("k", "v2")
		require.Equal(t, "v2", get(txn, "k"))

		// It took no read timestamp: while it is open, the read
		// watermark passes a read that began after it.
		later := db.NewTransaction(false)
		readTs := later.readTs
		later.Discard()
		require.Eventually(t, func() bool {
			return db.orc.readMark.DoneUntil() >= readTs
		}, 5*time.Second, time.Millisecond)
		txn.Discard()
	})
}
