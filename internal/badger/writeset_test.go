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

// TestWriteSet commits writes and deletions as one transaction: a
// transaction begun before sees none of them, one begun after sees all,
// the later of two writes of a key wins, and adding to a write set that
// has grown allocates nothing.
func TestWriteSet(t *testing.T) {
	runBadgerTest(t, nil, func(t *testing.T, db *DB) {
		require.NoError(t, db.Update(func(txn *Txn) error {
			return txn.Set([]byte("gone"), []byte("old"))
		}))
		before := db.NewTransaction(false)
		defer before.Discard()

		ws := db.NewWriteSet()
		require.NoError(t, ws.Set([]byte("a"), []byte("1"), 0))
		require.NoError(t, ws.Set([]byte("b"), []byte("first"), 0))
		require.NoError(t, ws.Delete([]byte("gone")))
		require.NoError(t, ws.Set([]byte("b"), []byte("second"), 0))
		require.Equal(t, 4, ws.Len())
		require.ErrorIs(t, ws.Set(nil, []byte("x"), 0), ErrEmptyKey)
		require.ErrorIs(t, ws.Set([]byte("!badger!k"), []byte("x"), 0), ErrInvalidKey)
		require.Equal(t, 4, ws.Len(), "a refused write is not added")
		require.NoError(t, ws.Commit())
		require.Equal(t, 0, ws.Len())

		_, err := before.Get([]byte("a"))
		require.ErrorIs(t, err, ErrKeyNotFound, "a transaction begun before the commit")
		require.NoError(t, db.View(func(txn *Txn) error {
			for k, want := range map[string]string{"a": "1", "b": "second"} {
				item, err := txn.Get([]byte(k))
				require.NoError(t, err, k)
				v, err := item.ValueCopy(nil)
				require.NoError(t, err)
				require.Equal(t, want, string(v), k)
			}
			_, err := txn.Get([]byte("gone"))
			require.ErrorIs(t, err, ErrKeyNotFound)
			return nil
		}))

		// The write set keeps its memory: adding and dropping again
		// allocates nothing.
		k, v := []byte("k"), []byte("v")
		require.Zero(t, testing.AllocsPerRun(100, func() {
			for range 3 {
				_ = ws.Set(k, v, 0)
			}
			ws.Truncate(0)
		}))
		require.NoError(t, ws.Commit(), "an empty write set commits nothing")
	})
}

// TestWriteSetTooBig fills a write set to what one transaction holds: the
// write past it is refused with ErrTxnTooBig and not added, Truncate
// gives the room back, and what was added commits.
func TestWriteSetTooBig(t *testing.T) {
	opt := getTestOptions("")
	opt.MemTableSize = 1 << 16 // a transaction of at most 15% of it
	opt.ValueThreshold = 1 << 10
	runBadgerTest(t, &opt, func(t *testing.T, db *DB) {
		ws := db.NewWriteSet()
		val := make([]byte, 100)
		n := 0
		for ; ; n++ {
			err := ws.Set([]byte(fmt.Sprintf("key%05d", n)), val, 0)
			if err != nil {
				require.ErrorIs(t, err, ErrTxnTooBig)
				break
			}
		}
		require.Equal(t, n, ws.Len())
		ws.Truncate(n - 1)
		require.NoError(t, ws.Set([]byte(fmt.Sprintf("key%05d", n-1)), val, 0), "room given back")
		require.ErrorIs(t, ws.Set([]byte("one more"), val, 0), ErrTxnTooBig)
		require.NoError(t, ws.Commit())
		require.NoError(t, db.View(func(txn *Txn) error {
			_, err := txn.Get([]byte(fmt.Sprintf("key%05d", n-1)))
			return err
		}))
	})
}
