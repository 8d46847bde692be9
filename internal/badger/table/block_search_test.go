//go:build upstream

/*
 * SPDX-FileCopyrightText: © 2017-2025 Istari Digital, Inc.
 * SPDX-License-Identifier: Apache-2.0
 */

package table

import (
	"fmt"
	"math/rand"
	"sort"
	"testing"

	"github.com/idemkit/idem/internal/badger/fb"
	"github.com/idemkit/idem/internal/badger/y"
	"github.com/stretchr/testify/require"
)

// TestSearchBlocksMatchesTheIndex checks searchBlocks, which compares each
// block's word in memory before its key in the index, against sort.Search
// over the index alone: for keys of tables whose first keys share a long
// prefix, differ only past eight bytes after it, end in zero bytes, or
// differ in length, and for probes inside, between, before, after and
// outside the tables' common prefix, at several timestamps.
func TestSearchBlocksMatchesTheIndex(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for _, c := range []struct {
		name string
		key  func(i int) string
	}{
		{"long common prefix", func(i int) string { return fmt.Sprintf("r\x00tenant/%08d-%x", i, rng.Uint32()) }},
		{"equal words", func(i int) string { return fmt.Sprintf("prefix--%s%06d", "abcdefgh", i) }},
		{"zero bytes", func(i int) string { return fmt.Sprintf("k%06d", i/3) + "\x00\x00\x00"[:i%3] }},
		{"lengths", func(i int) string { return fmt.Sprintf("%d", i*7919) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			opts := getTestTableOptions()
			opts.BlockSize = 256
			var kvs [][]string
			seen := map[string]bool{}
			for i := range 3000 {
				k := c.key(i)
				if !seen[k] {
					seen[k] = true
					kvs = append(kvs, []string{k, "v"})
				}
			}
			tbl := buildTable(t, kvs, opts)
			defer func() { require.NoError(t, tbl.DecrRef()) }()
			require.NotNil(t, tbl.blockWords)
			require.Greater(t, tbl.offsetsLength(), 20)

			want := func(key []byte) int {
				var ko fb.BlockOffset
				return sort.Search(tbl.offsetsLength(), func(i int) bool {
					require.True(t, tbl.offsets(&ko, i))
					return y.CompareKeys(ko.KeyBytes(), key) > 0
				})
			}
			probes := []string{"", "\x00", "r", "zzzz", "prefix--", "prefix--abcdefgh", "k", "k000100\x00\x00\x00\x00"}
			for _, kv := range kvs {
				k := kv[0]
				probes = append(probes, k, k+"\x00", k[:len(k)-1], k[:len(k)/2])
				b := []byte(k)
				b[len(b)-1]++
				probes = append(probes, string(b))
			}
			for _, p := range probes {
				for _, ts := range []uint64{0, 1, 1 << 40} {
					key := y.KeyWithTs([]byte(p), ts)
					require.Equal(t, want(key), tbl.searchBlocks(key), "%q @%d", p, ts)
				}
			}
		})
	}
}
