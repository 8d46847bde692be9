//go:build upstream

/*
 * SPDX-FileCopyrightText: © 2017-2025 Istari Digital, Inc.
 * SPDX-License-Identifier: Apache-2.0
 */

package table

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/internal/badger/options"
	"github.com/idemkit/idem/internal/badger/pb"
	"github.com/idemkit/idem/internal/badger/y"
)

// With compression and encryption, done by goroutines after each block
// is finished, a table of data that compresses well must still end once
// its uncompressed blocks, all of which stay in the builder's allocator
// until the table is written, reach twice its capacity: not when the
// compressed bytes do, 30 times later for zeros.
func TestBuilderReachedCapacityBoundsUncompressedBytes(t *testing.T) {
	key := &pb.DataKey{KeyId: 1, Data: make([]byte, 32)}
	for _, c := range []options.CompressionType{options.ZSTD, options.Snappy} {
		opts := compressing(c, key)
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

// With compression alone, each block is compressed as it is finished and
// its buffer reused: the builder's allocator never grows past its first
// buffer, whatever the uncompressed bytes, and the table ends when its
// compressed bytes reach its capacity.
func TestBuilderCompressesInline(t *testing.T) {
	for _, c := range []options.CompressionType{options.ZSTD, options.Snappy} {
		opts := compressing(c, nil)
		b := NewTableBuilder(opts)
		first := b.alloc.Allocated()
		value := make([]byte, 1<<10)
		var added uint64
		for i := 0; !b.ReachedCapacity(); i++ {
			require.Less(t, added, 256*opts.TableSize, "compression %d: no end", c)
			// Half zeros, half a counter's bytes: about 2 times smaller.
			for j := 0; j < len(value)/2; j += 8 {
				binary.BigEndian.PutUint64(value[j:], uint64(i)*0x9e3779b97f4a7c15+uint64(j))
			}
			b.Add(y.KeyWithTs([]byte(fmt.Sprintf("k%012d", i)), 1), y.ValueStruct{Value: value}, 0)
			added += uint64(len(value))
			require.Equal(t, first, b.alloc.Allocated(), "compression %d: the allocator grew", c)
		}
		require.Greater(t, uint64(b.uncompressedSize.Load()), b.opts.tableCapacity, "compression %d", c)
		require.LessOrEqual(t, uint64(b.compressedSize.Load()), b.opts.tableCapacity, "compression %d", c)

		// The table reads back whole.
		requireReadsBack(t, b, opts, int(added)/len(value), nil)
		b.Close()
	}
}

// compressing returns the options of a 1 MiB table of 4 KiB blocks
// compressed with c, encrypted with key if not nil.
func compressing(c options.CompressionType, key *pb.DataKey) Options {
	return Options{
		TableSize:            1 << 20,
		BlockSize:            4 << 10,
		BloomFalsePositive:   0.01,
		Compression:          c,
		ZSTDCompressionLevel: 1,
		DataKey:              key,
	}
}

// Entries larger than a block, which grow the block's buffer, and small
// ones after them in the reused buffer: every value reads back as it was
// written, whatever the sizes around it.
func TestBuilderCompressesInlineLargeEntries(t *testing.T) {
	sizes := []int{100, 9000, 20, 3000, 20000, 5000, 64, 4100}
	value := func(i int) []byte {
		v := make([]byte, sizes[i%len(sizes)])
		for j := range v {
			v[j] = byte(i*31 + j/7)
		}
		return v
	}
	for _, c := range []options.CompressionType{options.ZSTD, options.Snappy} {
		opts := compressing(c, nil)
		b := NewTableBuilder(opts)
		const n = 400
		for i := 0; i < n; i++ {
			b.Add(y.KeyWithTs([]byte(fmt.Sprintf("k%012d", i)), 1), y.ValueStruct{Value: value(i)}, 0)
		}
		requireReadsBack(t, b, opts, n, value)
		b.Close()
	}
}

// requireReadsBack finishes b and requires its table to hold the keys
// k000000000000 to n-1 in order, each with value(i) unless value is nil.
func requireReadsBack(t *testing.T, b *Builder, opts Options, n int, value func(int) []byte) {
	t.Helper()
	tbl, err := OpenInMemoryTable(b.Finish(), 1, &opts)
	require.NoError(t, err)
	it := tbl.NewIterator(0)
	i := 0
	for it.Rewind(); it.Valid(); it.Next() {
		require.Equal(t, fmt.Sprintf("k%012d", i), string(y.ParseKey(it.Key())))
		if value != nil {
			require.Equal(t, value(i), it.Value().Value, "compression %d: entry %d", opts.Compression, i)
		}
		i++
	}
	require.NoError(t, it.Close())
	require.Equal(t, n, i, "compression %d", opts.Compression)
	require.NoError(t, tbl.DecrRef())
}
