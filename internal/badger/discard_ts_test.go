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

// TestFlushLeavesOutVersionsOfWriteSets: write sets and transactions
// without a snapshot take no read timestamp, and the discard timestamp
// still moves with the commits once no reader is in flight, so a flush
// leaves out the versions they superseded; a reader begun between them
// still holds its version.
func TestFlushLeavesOutVersionsOfWriteSets(t *testing.T) {
	db, err := Open(getTestOptions(t.TempDir()).WithMemTableSize(1 << 20).WithValueLogFileSize(1 << 20).
		WithValueThreshold(1 << 10))
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	write := func(k, v string) {
		ws := db.NewWriteSet()
		if v == "" {
			require.NoError(t, ws.Delete([]byte(k)))
		} else {
			require.NoError(t, ws.Set([]byte(k), []byte(v), 0))
		}
		require.NoError(t, ws.Commit())
		latest := db.NewTransactionLatest()
		_, _ = latest.Get([]byte(k))
		latest.Discard()
	}
	write("a", "1")
	write("a", "2")
	write("gone", "1")
	write("gone", "")
	write("s", "old")
	reader := db.NewTransaction(false)
	write("s", "new")
	write("b", "1")
	write("b", "2")

	require.NoError(t, db.FlushMemTables())
	require.Equal(t, []string{"2"}, versions(t, db, "a"))
	require.Empty(t, versions(t, db, "gone"))
	require.Equal(t, []string{"new", "old"}, versions(t, db, "s"))
	require.Equal(t, []string{"2", "1"}, versions(t, db, "b"), "written after the reader began: above its timestamp")
	item, err := reader.Get([]byte("s"))
	require.NoError(t, err)
	require.Equal(t, "old", string(getItemValue(t, item)))
	reader.Discard()
}
