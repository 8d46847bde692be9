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
	"google.golang.org/protobuf/proto"

	"github.com/idemkit/idem/internal/badger/options"
	"github.com/idemkit/idem/internal/badger/pb"
	"github.com/idemkit/idem/internal/badger/y"
	"github.com/idemkit/idem/internal/ristretto/z"
)

// A builder whose allocator grew past its initial size (a table of more
// than twice its TableSize: a large memtable's flush, an L0->L0 table)
// must not hand that allocator back to the pool, which would keep its
// buffers for as long as compactions run.
func TestBuilderCloseReleasesGrownAllocator(t *testing.T) {
	pool := z.NewAllocatorPool(1)
	defer pool.Release()
	opts := Options{
		TableSize:          64 << 10,
		BlockSize:          4 << 10,
		BloomFalsePositive: 0.01,
		Compression:        options.None,
		AllocPool:          pool,
	}
	b := NewTableBuilder(opts)
	initial := b.alloc.Allocated()
	value := make([]byte, 1<<10)
	for i := 0; b.alloc.Allocated() <= initial; i++ {
		b.Add(y.KeyWithTs([]byte(key("k", i)), 1), y.ValueStruct{Value: value}, 0)
	}
	b.Close()

	next := pool.Get(2*int(opts.TableSize), "test")
	defer next.Release()
	require.LessOrEqual(t, next.Allocated(), initial,
		"the pool handed out the grown allocator of a closed builder")
}

// A builder that did not grow its allocator returns it to the pool.
func TestBuilderCloseReturnsAllocator(t *testing.T) {
	pool := z.NewAllocatorPool(1)
	defer pool.Release()
	opts := Options{TableSize: 64 << 10, BlockSize: 4 << 10, AllocPool: pool}
	b := NewTableBuilder(opts)
	b.Add(y.KeyWithTs([]byte("k"), 1), y.ValueStruct{Value: []byte("v")}, 0)
	alloc := b.alloc
	b.Close()

	next := pool.Get(2*int(opts.TableSize), "test")
	defer next.Release()
	require.Same(t, alloc, next, "the pool did not hand out the closed builder's allocator")
}

// Building a table allocates per table, not per block or per key: the
// blocks' entry offsets share one slice, their base keys are in the
// allocator, and the key hashes come from the last builder closed.
func TestBuilderAllocatesPerTable(t *testing.T) {
	pool := z.NewAllocatorPool(1)
	defer pool.Release()
	opts := Options{TableSize: 512 << 10, BlockSize: 4 << 10, BloomFalsePositive: 0.01,
		Compression: options.Snappy, AllocPool: pool}
	keys := make([][]byte, 4000)
	for i := range keys {
		keys[i] = y.KeyWithTs([]byte(key("k", i)), 1)
	}
	value := make([]byte, 100)
	blocks := 0
	build := func() {
		b := NewTableBuilder(opts)
		for _, k := range keys {
			b.Add(k, y.ValueStruct{Value: value}, 0)
		}
		bd := b.Done()
		blocks = len(bd.blockList)
		b.Close()
	}
	build()
	allocs := testing.AllocsPerRun(20, build)
	require.Greater(t, blocks, 100)
	// Block headers 32 at a time, the block list's growth, the index, the
	// filter and the checksum: 34 allocations for 122 blocks. Before, each
	// block also took its header, a copy of its base key, its offsets'
	// growth and its checksum's encoding (396 allocations), and the key
	// hashes grew a dozen times.
	require.Less(t, allocs, float64(blocks)/3, "%v allocations for %d blocks", allocs, blocks)
}

// The checksum's encoding is proto.Marshal's, zero sums and algorithms
// left out as it leaves them out.
func TestBuilderChecksumIsProtoEncoding(t *testing.T) {
	b := NewTableBuilder(Options{TableSize: 64 << 10, BlockSize: 4 << 10})
	defer b.Close()
	for _, data := range [][]byte{nil, []byte("a"), make([]byte, 4096), []byte("the block")} {
		want, err := proto.Marshal(&pb.Checksum{Sum: y.CalculateChecksum(data, pb.Checksum_CRC32C), Algo: pb.Checksum_CRC32C})
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("%x", want), fmt.Sprintf("%x", b.calculateChecksum(data)))
	}
	for _, c := range []*pb.Checksum{{}, {Sum: 1}, {Algo: pb.Checksum_XXHash64}, {Sum: 1 << 63, Algo: pb.Checksum_XXHash64}} {
		want, err := proto.Marshal(c)
		require.NoError(t, err)
		got := b.encodeChecksum(c)
		require.Equal(t, fmt.Sprintf("%x", want), fmt.Sprintf("%x", got), "%v", c)
		var back pb.Checksum
		require.NoError(t, proto.Unmarshal(got, &back))
		require.Equal(t, c.Sum, back.Sum)
		require.Equal(t, c.Algo, back.Algo)
	}
}
