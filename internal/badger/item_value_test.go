//go:build upstream

/*
 * SPDX-FileCopyrightText: © 2017-2025 Istari Digital, Inc.
 * SPDX-License-Identifier: Apache-2.0
 */

package badger

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// TestItemValueHandsOverLSMValue reads an item whose value is in the LSM
// tree: Txn.Get already gave the item its own copy (vptr), and Value hands
// that over as it is, where it copied it again into a buffer of the
// item's own. ValueCopy still copies.
func TestItemValueHandsOverLSMValue(t *testing.T) {
	runBadgerTest(t, nil, func(t *testing.T, db *DB) {
		require.NoError(t, db.Update(func(txn *Txn) error { return txn.Set([]byte("key"), []byte("a small value")) }))
		require.NoError(t, db.View(func(txn *Txn) error {
			item, err := txn.Get([]byte("key"))
			require.NoError(t, err)
			require.NoError(t, item.Value(func(v []byte) error {
				require.Equal(t, "a small value", string(v))
				require.True(t, unsafe.SliceData(item.vptr) == unsafe.SliceData(v), "the item's own copy, not another")
				return nil
			}))
			v, err := item.ValueCopy(nil)
			require.NoError(t, err)
			v[0] = 'X' // a copy: the item's value is unchanged
			return item.Value(func(v []byte) error {
				require.Equal(t, "a small value", string(v))
				return nil
			})
		}))
	})
}
