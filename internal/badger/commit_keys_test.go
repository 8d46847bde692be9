//go:build upstream

/*
 * SPDX-FileCopyrightText: © 2017-2025 Istari Digital, Inc.
 * SPDX-License-Identifier: Apache-2.0
 */

package badger

import (
	"fmt"
	"sort"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// TestCommitVersionsKeysInOneBuffer commits a transaction of several
// entries and finds their versioned keys side by side in one buffer, each
// with its capacity at its end: one allocation per commit, not one per
// entry.
func TestCommitVersionsKeysInOneBuffer(t *testing.T) {
	runBadgerTest(t, nil, func(t *testing.T, db *DB) {
		txn := db.NewTransaction(true)
		var entries []*Entry
		for i := range 8 {
			e := NewEntry([]byte(fmt.Sprintf("key-%d", i)), []byte("v"))
			require.NoError(t, txn.SetEntry(e))
			entries = append(entries, e)
		}
		require.NoError(t, txn.Commit())
		// commitAndSend replaced each entry's key by its versioned key.
		sort.Slice(entries, func(i, j int) bool {
			return uintptr(unsafe.Pointer(unsafe.SliceData(entries[i].Key))) <
				uintptr(unsafe.Pointer(unsafe.SliceData(entries[j].Key)))
		})
		for i, e := range entries {
			require.Len(t, e.Key, len("key-0")+8)
			require.Equal(t, len(e.Key), cap(e.Key), "a key's capacity ends with it")
			if i > 0 {
				prev := entries[i-1].Key
				end := uintptr(unsafe.Pointer(unsafe.SliceData(prev))) + uintptr(len(prev))
				require.Equal(t, end, uintptr(unsafe.Pointer(unsafe.SliceData(e.Key))),
					"versioned keys side by side in one buffer")
			}
		}
	})
}
