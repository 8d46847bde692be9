//go:build upstream

/*
 * SPDX-FileCopyrightText: © 2017-2025 Istari Digital, Inc.
 * SPDX-License-Identifier: Apache-2.0
 */

package table

import (
	"crypto/rand"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/internal/badger/fb"
	"github.com/idemkit/idem/internal/badger/pb"
	"github.com/idemkit/idem/internal/badger/y"
	"github.com/idemkit/idem/internal/ristretto"
)

// TestDoesNotHaveReadsTheKeptFilter checks that a table keeps its Bloom
// filter's bytes only when it is not encrypted, and that DoesNotHave
// answers as the index's filter does, for keys held and keys not, in
// both.
func TestDoesNotHaveReadsTheKeptFilter(t *testing.T) {
	cache, err := ristretto.NewCache[uint64, *fb.TableIndex](&ristretto.Config[uint64, *fb.TableIndex]{
		NumCounters: 1000, MaxCost: 1 << 20, BufferItems: 64})
	require.NoError(t, err)
	defer cache.Close()
	dataKey := make([]byte, 32)
	_, _ = rand.Read(dataKey)
	for _, encrypted := range []bool{false, true} {
		t.Run(fmt.Sprintf("encrypted=%v", encrypted), func(t *testing.T) {
			opts := getTestTableOptions()
			if encrypted {
				opts.DataKey, opts.IndexCache = &pb.DataKey{Data: dataKey}, cache
			}
			tbl := buildTestTable(t, "key", 2000, opts)
			defer func() { require.NoError(t, tbl.DecrRef()) }()
			require.Equal(t, encrypted, tbl.bloom == nil)
			filter := y.Filter(tbl.fetchIndex().BloomFilterBytes())
			passed := 0
			for i := range 4000 {
				h := y.Hash([]byte(key("key", i)))
				require.Equal(t, !filter.MayContain(h), tbl.DoesNotHave(h), "key %d", i)
				if i < 2000 {
					require.False(t, tbl.DoesNotHave(h), "a key the table holds, %d", i)
				} else if !tbl.DoesNotHave(h) {
					passed++
				}
			}
			require.Less(t, passed, 2000/20, "the filter lets most keys it does not hold through")
		})
	}
}
