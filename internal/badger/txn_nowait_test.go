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

// TestNewTransactionNoWait holds a commit timestamp handed out and not done,
// as a commit in progress does: NewTransaction waits for it, and
// NewTransactionNoWait does not, reading at the same timestamp and seeing
// every commit that returned before it began.
func TestNewTransactionNoWait(t *testing.T) {
	runBadgerTest(t, nil, func(t *testing.T, db *DB) {
		require.NoError(t, db.Update(func(txn *Txn) error {
			return txn.Set([]byte("done"), []byte("v1"))
		}))

		// A commit in progress: its timestamp is handed out, and its
		// entries are not written yet.
		db.orc.Lock()
		inFlight := db.orc.nextTxnTs
		db.orc.nextTxnTs++
		db.orc.txnMark.Begin(inFlight)
		db.orc.Unlock()

		waited := make(chan uint64, 1)
		go func() {
			txn := db.NewTransaction(false)
			defer txn.Discard()
			waited <- txn.readTs
		}()

		txn := db.NewTransactionNoWait(false)
		require.Equal(t, inFlight, txn.readTs)
		item, err := txn.Get([]byte("done"))
		require.NoError(t, err)
		val, err := item.ValueCopy(nil)
		require.NoError(t, err)
		require.Equal(t, []byte("v1"), val)
		txn.Discard()

		select {
		case <-waited:
			t.Fatal("NewTransaction returned with a commit before its read timestamp in progress")
		case <-time.After(100 * time.Millisecond):
		}
		db.orc.txnMark.Done(inFlight)
		require.Equal(t, inFlight, <-waited)

		// An update transaction from it commits as one from NewTransaction.
		wtxn := db.NewTransactionNoWait(true)
		require.NoError(t, wtxn.Set([]byte("k"), []byte("v2")))
		require.NoError(t, wtxn.Commit())
		require.NoError(t, db.View(func(txn *Txn) error {
			item, err := txn.Get([]byte("k"))
			require.NoError(t, err)
			require.Equal(t, inFlight+1, item.Version())
			return nil
		}))
	})
}
