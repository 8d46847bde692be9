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

// versions returns every version of key the DB holds, newest first, as
// their values ("<deleted>" for a deletion).
func versions(t *testing.T, db *DB, key string) []string {
	t.Helper()
	var out []string
	require.NoError(t, db.View(func(txn *Txn) error {
		it := txn.NewIterator(IteratorOptions{AllVersions: true, Prefix: []byte(key)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			if string(item.Key()) != key {
				continue
			}
			if item.IsDeletedOrExpired() {
				out = append(out, "<deleted>")
				continue
			}
			out = append(out, string(getItemValue(t, item)))
		}
		return nil
	}))
	return out
}

// TestFlushLeavesOutHiddenVersions flushes a memtable in which keys were
// written several times: the table holds only the newest version of each
// (a deletion's marker left out too, since no table holds the key), while a transaction that began between two
// versions holds the flush to the versions it can still read.
func TestFlushLeavesOutHiddenVersions(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(getTestOptions(dir).WithMemTableSize(1 << 20).WithValueLogFileSize(1 << 20).
		WithValueThreshold(1 << 10))
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	set := func(k, v string) {
		require.NoError(t, db.Update(func(txn *Txn) error { return txn.Set([]byte(k), []byte(v)) }))
	}
	set("a", "1")
	set("a", "2")
	set("a", "3")
	set("d", "1")
	require.NoError(t, db.Update(func(txn *Txn) error { return txn.Delete([]byte("d")) }))
	set("s", "old")
	reader := db.NewTransaction(false) // sees s=old, and must go on seeing it
	defer reader.Discard()
	set("s", "new")

	require.NoError(t, db.FlushMemTables())
	require.Len(t, db.Tables(), 1)
	require.Equal(t, []string{"3"}, versions(t, db, "a"))
	require.Empty(t, versions(t, db, "d"), "a key set and deleted in the memtable, held by no table, leaves nothing")
	require.Equal(t, []string{"new", "old"}, versions(t, db, "s"))
	item, err := reader.Get([]byte("s"))
	require.NoError(t, err)
	require.Equal(t, "old", string(getItemValue(t, item)))
}

// TestFlushKeepsMarkersOfKeysInTables: a deletion marker is left out of a
// flush only when no table may hold its key. A key flushed to a table
// (and compacted to a lower level) keeps its marker when it is deleted in
// a later memtable, and stays deleted; a key set and deleted within the
// later memtable leaves nothing, there or in the tables.
func TestFlushKeepsMarkersOfKeysInTables(t *testing.T) {
	for _, compact := range []bool{false, true} {
		dir := t.TempDir()
		db, err := Open(getTestOptions(dir).WithMemTableSize(1 << 20).WithValueLogFileSize(1 << 20).
			WithValueThreshold(1 << 10))
		require.NoError(t, err)
		set := func(k, v string) {
			require.NoError(t, db.Update(func(txn *Txn) error { return txn.Set([]byte(k), []byte(v)) }))
		}
		del := func(k string) {
			require.NoError(t, db.Update(func(txn *Txn) error { return txn.Delete([]byte(k)) }))
		}
		for i := range 100 {
			set(fmt.Sprintf("old%03d", i), "v")
		}
		require.NoError(t, db.FlushMemTables())
		if compact {
			require.NoError(t, db.lc.doCompact(0, compactionPriority{level: 0, t: db.lc.levelTargets()}))
			low := false
			for _, ti := range db.Tables() {
				low = low || ti.Level > 0
			}
			require.True(t, low, "Flatten left no table below level 0")
		}
		del("old050")
		set("new", "v")
		del("new")
		require.NoError(t, db.FlushMemTables())
		require.Equal(t, []string{"<deleted>"}, versions(t, db, "old050")[:1], "compact %v", compact)
		require.Empty(t, versions(t, db, "new"), "compact %v", compact)
		require.NoError(t, db.View(func(txn *Txn) error {
			_, err := txn.Get([]byte("old050"))
			require.ErrorIs(t, err, ErrKeyNotFound)
			_, err = txn.Get([]byte("old051"))
			return err
		}))
		require.NoError(t, db.Close())
	}
}
