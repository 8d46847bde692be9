//go:build upstream

/*
 * SPDX-FileCopyrightText: © 2017-2025 Istari Digital, Inc.
 * SPDX-License-Identifier: Apache-2.0
 */

package badger

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/internal/badger/skl"
	"github.com/idemkit/idem/internal/badger/y"
)

// TestSkiplistPutAllocatesNothing puts new keys into a skiplist: the key,
// the value and the node go into the arena, and nothing is allocated on
// the heap (the arena's bound checks boxed their message's arguments on
// every put: three allocations each).
func TestSkiplistPutAllocatesNothing(t *testing.T) {
	s := skl.NewSkiplist(64 << 20)
	defer s.DecrRef()
	key := make([]byte, 24)
	val := y.ValueStruct{Value: []byte("a value of some length")}
	var i uint64
	allocs := testing.AllocsPerRun(10000, func() {
		i++
		binary.BigEndian.PutUint64(key[8:], i)
		binary.BigEndian.PutUint64(key[16:], 1) // the version
		s.Put(key, val)
	})
	require.Zero(t, allocs, "heap allocations per put")
}
