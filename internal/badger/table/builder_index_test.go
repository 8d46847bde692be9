//go:build upstream

/*
 * SPDX-FileCopyrightText: © 2017-2025 Istari Digital, Inc.
 * SPDX-License-Identifier: Apache-2.0
 */

package table

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/internal/badger/options"
	"github.com/idemkit/idem/internal/badger/y"
)

// The index of a small table is a few KiB: building it must not start
// from a 3 MiB flatbuffers builder, an allocation per table that made most
// of the bytes a compaction allocates.
func TestBuilderIndexSizedForItsTable(t *testing.T) {
	opts := Options{
		TableSize:          1 << 20,
		BlockSize:          4 << 10,
		BloomFalsePositive: 0.01,
		Compression:        options.None,
	}
	b := NewTableBuilder(opts)
	defer b.Close()
	for i := 0; i < 1000; i++ {
		b.Add(y.KeyWithTs([]byte(key("k", i)), 1), y.ValueStruct{Value: []byte("value")}, 0)
	}
	b.finishBlock()
	bloom := y.NewFilter(b.keyHashes, y.BloomBitsPerKey(len(b.keyHashes), opts.BloomFalsePositive))

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	index, _ := b.buildIndex(bloom)
	runtime.ReadMemStats(&after)

	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("index of %d bytes, %d bytes allocated to build it", len(index), allocated)
	require.Less(t, allocated, uint64(1<<20), "building a %d-byte index allocated %d bytes", len(index), allocated)
}
