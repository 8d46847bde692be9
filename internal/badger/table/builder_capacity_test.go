//go:build upstream

/*
 * SPDX-FileCopyrightText: © 2017-2025 Istari Digital, Inc.
 * SPDX-License-Identifier: Apache-2.0
 */

package table

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/internal/badger/options"
	"github.com/idemkit/idem/internal/badger/y"
)

// With compression, a table of data that compresses well must still end
// once its uncompressed blocks, all of which stay in the builder's
// allocator until the table is written, reach twice its capacity: not when
// the compressed bytes do, 30 times later for zeros.
func TestBuilderReachedCapacityBoundsUncompressedBytes(t *testing.T) {
	for _, c := range []options.CompressionType{options.ZSTD, options.Snappy} {
		opts := Options{
			TableSize:            1 << 20,
			BlockSize:            4 << 10,
			BloomFalsePositive:   0.01,
			Compression:          c,
			ZSTDCompressionLevel: 1,
		}
		b := NewTableBuilder(opts)
		value := make([]byte, 1<<10) // zeros: they compress 30 times and more
		limit := 16 * opts.TableSize
		var added uint64
		for !b.ReachedCapacity() {
			require.Less(t, added, limit, "compression %d: %d bytes added without reaching capacity", c, added)
			b.Add(y.KeyWithTs([]byte(fmt.Sprintf("k%012d", added)), 1), y.ValueStruct{Value: value}, 0)
			added += uint64(len(value))
		}
		// The bound is checked as blocks are finished: one block over it at most.
		require.LessOrEqual(t, uint64(b.uncompressedSize.Load()),
			2*b.opts.tableCapacity+uint64(opts.BlockSize)+(2<<10),
			"compression %d", c)
		b.Close()
	}
}
