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
// (a deletion's marker kept), while a transaction that began between two
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
	require.Equal(t, []string{"<deleted>"}, versions(t, db, "d"))
	require.Equal(t, []string{"new", "old"}, versions(t, db, "s"))
	item, err := reader.Get([]byte("s"))
	require.NoError(t, err)
	require.Equal(t, "old", string(getItemValue(t, item)))
}
