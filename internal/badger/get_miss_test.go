//go:build upstream

/*
 * SPDX-FileCopyrightText: © 2017-2025 Istari Digital, Inc.
 * SPDX-License-Identifier: Apache-2.0
 */

package badger

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestGetMissAllocatesNoItem reads a key that is absent from a DB whose
// only data is in the memtable: Txn.Get allocates the item it returns only
// for a key it found, so a miss costs the versioned key it seeks with and
// nothing more. Before: 2 allocations.
func TestGetMissAllocatesNoItem(t *testing.T) {
	runBadgerTest(t, nil, func(t *testing.T, db *DB) {
		require.NoError(t, db.Update(func(txn *Txn) error {
			return txn.Set([]byte("present"), []byte("v"))
		}))
		txn := db.NewTransaction(false)
		defer txn.Discard()
		absent := []byte("absent")
		miss := testing.AllocsPerRun(1000, func() {
			if _, err := txn.Get(absent); err != ErrKeyNotFound {
				t.Fatal(err)
			}
		})
		require.LessOrEqual(t, miss, 1.0)
		item, err := txn.Get([]byte("present"))
		require.NoError(t, err)
		require.Equal(t, []byte("present"), item.Key())
	})
}
