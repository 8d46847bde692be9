//go:build upstream

/*
 * SPDX-FileCopyrightText: © 2017-2025 Istari Digital, Inc.
 * SPDX-License-Identifier: Apache-2.0
 */

package badger

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/internal/badger/skl"
	"github.com/idemkit/idem/internal/badger/y"
)

// TestSkiplistArenaPool releases a pooled skiplist full of keys and
// builds the next one on the same buffer: the new skiplist starts empty
// (its head was cleared) and holds exactly what is put in it.
func TestSkiplistArenaPool(t *testing.T) {
	var pool skl.ArenaPool
	const size = 1 << 20
	first := skl.NewSkiplistPooled(size, &pool)
	for i := range 1000 {
		first.Put(y.KeyWithTs([]byte(fmt.Sprintf("old%04d", i)), 1), y.ValueStruct{Value: []byte("old value")})
	}
	first.DecrRef()

	// The same buffer, reused: the point of the pool.
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	second := skl.NewSkiplistPooled(size, &pool)
	runtime.ReadMemStats(&after)
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(size/2), "a new arena was allocated")
	defer second.DecrRef()
	require.True(t, second.Empty())
	require.Zero(t, second.Get(y.KeyWithTs([]byte("old0000"), 1)).Meta)
	for i := range 10 {
		second.Put(y.KeyWithTs([]byte(fmt.Sprintf("new%04d", i)), 1), y.ValueStruct{Value: []byte("new value"), Meta: 1})
	}
	it := second.NewIterator()
	defer it.Close()
	n := 0
	for it.SeekToFirst(); it.Valid(); it.Next() {
		require.True(t, bytes.HasPrefix(it.Key(), []byte("new")), "key %q", it.Key())
		require.Equal(t, "new value", string(it.Value().Value))
		n++
	}
	require.Equal(t, 10, n)
}

// TestValueReadFromMemtableOutlivesIt reads a value from the memtable,
// then flushes that memtable and fills the next one, which takes over its
// arena: the value read is the caller's copy and does not change.
func TestValueReadFromMemtableOutlivesIt(t *testing.T) {
	opt := getTestOptions("")
	opt.MemTableSize = 1 << 20
	opt.ValueThreshold = 1 << 10
	runBadgerTest(t, &opt, func(t *testing.T, db *DB) {
		require.NoError(t, db.Update(func(txn *Txn) error { return txn.Set([]byte("key"), []byte("the first value")) }))
		txn := db.NewTransaction(false)
		defer txn.Discard()
		item, err := txn.Get([]byte("key"))
		require.NoError(t, err)
		for round := range 3 {
			require.NoError(t, db.FlushMemTables())
			for i := range 2000 {
				k := []byte(fmt.Sprintf("filler-%d-%05d", round, i))
				require.NoError(t, db.Update(func(txn *Txn) error { return txn.Set(k, bytes.Repeat([]byte{'x'}, 64)) }))
			}
		}
		require.NoError(t, item.Value(func(v []byte) error {
			require.Equal(t, "the first value", string(v))
			return nil
		}))
	})
}
