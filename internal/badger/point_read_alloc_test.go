//go:build upstream

/*
 * SPDX-FileCopyrightText: © 2017-2025 Istari Digital, Inc.
 * SPDX-License-Identifier: Apache-2.0
 */

package badger

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPointReadAllocations reads absent and present keys from a DB with
// several memtables and tables on level 0 and below, and bounds the
// allocations of one read: finding the memtables and the tables to look
// in allocates nothing (it returned a slice and a closure per level and
// per read), and neither does seeking in a table (an iterator and a
// deferred Close per table the Bloom filter let through).
func TestPointReadAllocations(t *testing.T) {
	opt := getTestOptions("")
	opt.MemTableSize = 1 << 20
	opt.ValueThreshold = 1 << 10
	opt.NumLevelZeroTables = 20
	opt.NumLevelZeroTablesStall = 40
	runBadgerTest(t, &opt, func(t *testing.T, db *DB) {
		val := make([]byte, 100)
		for round := range 4 {
			txn := db.NewTransaction(true)
			for i := range 200 {
				require.NoError(t, txn.Set([]byte(fmt.Sprintf("key%d-%05d", round, i)), val))
			}
			require.NoError(t, txn.Commit())
			if round < 3 {
				require.NoError(t, db.FlushMemTables())
			}
		}
		read := func(key []byte) func() {
			return func() {
				txn := db.NewTransaction(false)
				defer txn.Discard()
				_, _ = txn.Get(key)
			}
		}
		// What is left: the transaction, the versioned key, the item, and
		// for a present key the value's copy out of its block and the
		// iterator's key. Before: 7 for an absent key, 14 for this one.
		absent := testing.AllocsPerRun(1000, read([]byte("key9-00000")))
		// The present key's block goes into the block cache on its first
		// read, which the cache applies on a goroutine of its own: wait
		// for it, so that no read measured below still inserts it.
		read([]byte("key1-00100"))()
		db.blockCache.Wait()
		present := testing.AllocsPerRun(1000, read([]byte("key1-00100")))
		t.Logf("allocations per read: absent %.1f, present %.1f", absent, present)
		require.LessOrEqual(t, absent, 4.0)
		require.LessOrEqual(t, present, 10.0)
	})
}
