//go:build upstream

/*
 * SPDX-FileCopyrightText: © 2017-2025 Istari Digital, Inc.
 * SPDX-License-Identifier: Apache-2.0
 */

package badger

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// smallOptions keeps the files small enough to copy.
func smallOptions(dir string) Options {
	return getTestOptions(dir).WithMemTableSize(1 << 20).WithValueLogFileSize(1 << 20).
		WithValueThreshold(1 << 10)
}

// memFiles lists the memtable logs in dir.
func memFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var out []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), memFileExt) {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestDisableMemTableWAL writes through several memtables with no memtable
// log: no .mem file is made, every write reads back, FlushMemTables leaves
// nothing in memory, and what it flushed survives a reopen.
func TestDisableMemTableWAL(t *testing.T) {
	dir := t.TempDir()
	opt := smallOptions(dir).WithDisableMemTableWAL(true)
	db, err := Open(opt)
	require.NoError(t, err)
	const n = 20000
	key := func(i int) []byte { return []byte(fmt.Sprintf("key%06d", i)) }
	val := func(i int) []byte { return []byte(fmt.Sprintf("value %06d %0100d", i, i)) }
	for i := 0; i < n; i += 100 {
		require.NoError(t, db.Update(func(txn *Txn) error {
			for j := i; j < i+100; j++ {
				if err := txn.Set(key(j), val(j)); err != nil {
					return err
				}
			}
			return nil
		}))
	}
	require.Empty(t, memFiles(t, dir))
	require.NoError(t, db.FlushMemTables())
	db.lock.RLock()
	require.True(t, db.mt.sl.Empty())
	require.Empty(t, db.imm)
	db.lock.RUnlock()
	require.NoError(t, db.FlushMemTables()) // nothing to flush: returns at once
	// A write after the flush is in no file until the next one.
	require.NoError(t, db.Update(func(txn *Txn) error { return txn.Set([]byte("later"), []byte("x")) }))

	// What a crash would leave: the files as they are, with the DB open.
	crashed := snapshotDir(t, dir)
	require.NoError(t, db.Close())
	db2, err := Open(opt.WithDir(crashed).WithValueDir(crashed))
	require.NoError(t, err)
	defer func() { require.NoError(t, db2.Close()) }()
	require.NoError(t, db2.View(func(txn *Txn) error {
		for i := 0; i < n; i++ {
			item, err := txn.Get(key(i))
			if err != nil {
				return fmt.Errorf("key %d: %w", i, err)
			}
			require.Equal(t, val(i), getItemValue(t, item))
		}
		_, err := txn.Get([]byte("later"))
		require.ErrorIs(t, err, ErrKeyNotFound)
		return nil
	}))
}

// snapshotDir copies the regular files of dir into a new directory.
func snapshotDir(t *testing.T, dir string) string {
	t.Helper()
	to := t.TempDir()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(to, e.Name()), b, 0o600))
	}
	return to
}

// TestDisableMemTableWALReplaysOldLogs opens, without memtable logs, a
// directory whose memtable logs an earlier open left: their writes are
// read, then flushed, and the logs removed.
func TestDisableMemTableWALReplaysOldLogs(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(smallOptions(dir))
	require.NoError(t, err)
	require.NoError(t, db.Update(func(txn *Txn) error { return txn.Set([]byte("a"), []byte("1")) }))
	require.NoError(t, db.Sync())
	require.NotEmpty(t, memFiles(t, dir))
	// Leave the memtable log behind, as a crash would.
	crashed := snapshotDir(t, dir)
	require.NoError(t, db.Close())
	dir = crashed

	db2, err := Open(smallOptions(dir).WithDisableMemTableWAL(true))
	require.NoError(t, err)
	defer func() { require.NoError(t, db2.Close()) }()
	require.NoError(t, db2.View(func(txn *Txn) error {
		item, err := txn.Get([]byte("a"))
		require.NoError(t, err)
		require.Equal(t, []byte("1"), getItemValue(t, item))
		return nil
	}))
	require.NoError(t, db2.FlushMemTables())
	require.Empty(t, memFiles(t, dir))
	_, err = os.Stat(filepath.Join(dir, "MANIFEST"))
	require.NoError(t, err)
}
