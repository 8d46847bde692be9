//go:build upstream

/*
 * SPDX-FileCopyrightText: © 2017-2025 Istari Digital, Inc.
 * SPDX-License-Identifier: Apache-2.0
 */

package table

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/internal/badger/options"
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
