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

	"github.com/idemkit/idem/internal/badger/options"
)

// TestCompressionWithoutBlockCache opens a DB that compresses its tables
// with no block cache (Open panicked), writes enough for tables of many
// blocks, compacts them and reads every key back, by Get and by
// iteration, before and after a reopen.
func TestCompressionWithoutBlockCache(t *testing.T) {
	for _, c := range []options.CompressionType{options.Snappy, options.ZSTD} {
		t.Run(fmt.Sprint(c), func(t *testing.T) {
			dir := t.TempDir()
			opt := getTestOptions(dir).WithCompression(c).WithBlockCacheSize(0).
				WithBlockSize(1 << 10).WithMemTableSize(1 << 20).WithValueThreshold(1 << 10)
			const n = 5000
			value := func(i int) []byte { return []byte(fmt.Sprintf("value %06d %0100d", i, i)) }
			check := func(db *DB) {
				require.NoError(t, db.View(func(txn *Txn) error {
					for i := 0; i < n; i += 7 {
						item, err := txn.Get([]byte(fmt.Sprintf("key%06d", i)))
						require.NoError(t, err)
						require.Equal(t, value(i), getItemValue(t, item))
					}
					it := txn.NewIterator(DefaultIteratorOptions)
					defer it.Close()
					i := 0
					for it.Rewind(); it.Valid(); it.Next() {
						require.Equal(t, fmt.Sprintf("key%06d", i), string(it.Item().Key()))
						require.Equal(t, value(i), getItemValue(t, it.Item()))
						i++
					}
					require.Equal(t, n, i)
					return nil
				}))
			}

			db, err := Open(opt)
			require.NoError(t, err)
			wb := db.NewWriteBatch()
			for i := 0; i < n; i++ {
				require.NoError(t, wb.Set([]byte(fmt.Sprintf("key%06d", i)), value(i)))
			}
			require.NoError(t, wb.Flush())
			require.NoError(t, db.Flatten(1))
			check(db)
			require.NoError(t, db.Close())

			db, err = Open(opt)
			require.NoError(t, err)
			defer func() { require.NoError(t, db.Close()) }()
			require.NotEmpty(t, db.Tables())
			check(db)
		})
	}
}
