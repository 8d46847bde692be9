//go:build upstream

/*
 * SPDX-FileCopyrightText: © 2017-2025 Istari Digital, Inc.
 * SPDX-License-Identifier: Apache-2.0
 */

package badger

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/internal/ristretto/z"
)

// The DB's pool keeps NumAllocatorsPooled allocators for the next table
// builders, and no more.
func TestAllocatorsPooled(t *testing.T) {
	db, err := Open(DefaultOptions("").WithInMemory(true).WithNumAllocatorsPooled(3).WithLoggingLevel(ERROR))
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()

	var taken []*z.Allocator
	for range 4 {
		taken = append(taken, db.allocPool.Get(1<<10, "test"))
	}
	for _, a := range taken {
		db.allocPool.Return(a)
	}
	kept := map[*z.Allocator]bool{}
	for range 3 {
		a := db.allocPool.Get(1<<10, "test")
		require.Contains(t, taken, a, "a pooled allocator was not kept")
		kept[a] = true
	}
	fresh := db.allocPool.Get(1<<10, "test")
	require.NotContains(t, taken, fresh, "the pool kept more than 3")
	require.Len(t, kept, 3)
	fresh.Release()
	for a := range kept {
		a.Release()
	}
}
