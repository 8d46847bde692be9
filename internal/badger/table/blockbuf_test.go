//go:build upstream

/*
 * SPDX-FileCopyrightText: © 2017-2025 Istari Digital, Inc.
 * SPDX-License-Identifier: Apache-2.0
 */

package table

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/internal/badger/options"
	"github.com/idemkit/idem/internal/badger/y"
)

// TestDecodedBlocksReuseBuffers iterates a compressed table of many blocks
// with two iterators in step, checking every entry: each block decodes
// into a buffer a released block gave back, never one a live block still
// uses, so a pass allocates a small part of the bytes it decodes.
func TestDecodedBlocksReuseBuffers(t *testing.T) {
	if usingJemalloc {
		t.Skip("with jemalloc decoded blocks are freed, not pooled")
	}
	for _, c := range []options.CompressionType{options.Snappy, options.ZSTD} {
		t.Run(fmt.Sprint(c), func(t *testing.T) {
			opts := Options{Compression: c, BlockSize: 4 << 10, BloomFalsePositive: 0.01}
			const n = 10000
			tbl := buildTestTable(t, "k", n, opts)
			defer func() { require.NoError(t, tbl.DecrRef()) }()
			pass := func() {
				a, b := tbl.NewIterator(0), tbl.NewIterator(0)
				defer a.Close()
				defer b.Close()
				a.Rewind()
				b.Rewind()
				i, j := 0, 0 // a's entry and b's
				for ; a.Valid(); a.Next() {
					require.Equal(t, key("k", i), string(y.ParseKey(a.Key())))
					require.Equal(t, fmt.Sprintf("%d", i), string(a.Value().Value))
					require.True(t, b.Valid())
					require.Equal(t, key("k", j), string(y.ParseKey(b.Key())))
					require.Equal(t, fmt.Sprintf("%d", j), string(b.Value().Value))
					if i%2 == 1 {
						b.Next() // b goes half as fast, holding its blocks longer
						j++
					}
					i++
				}
				require.Equal(t, n, i)
			}
			pass()
			// A pass that allocates nothing of its own: what it allocates
			// is the blocks' buffers.
			plain := func() {
				it := tbl.NewIterator(0)
				defer it.Close()
				for it.Rewind(); it.Valid(); it.Next() {
					_ = it.Value()
				}
			}
			plain() // fills the pool
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			plain()
			runtime.ReadMemStats(&after)
			decoded := uint64(tbl.offsetsLength()) * uint64(opts.BlockSize)
			require.Less(t, after.TotalAlloc-before.TotalAlloc, decoded/4,
				"a pass over %d blocks allocated about as much as it decoded", tbl.offsetsLength())
		})
	}
}
