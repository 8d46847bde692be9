package badgerstore

import (
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/internal/badger"
)

// badgerShares are the sizes Badger gets from a budget.
type badgerShares struct {
	memTable, baseTable, indexCache int64
	memTables                       int // NumMemtables: those that may wait to be flushed
}

// badgerSharesOf returns Badger's sizes for the budget b (already
// defaulted): memtables of B/32 (1 to 64 MiB), two of them waiting to be
// flushed at most, one below the default budget; tables of B/128 (256 KiB
// to 8 MiB); an index cache of B/32.
func badgerSharesOf(b int64) badgerShares {
	const k64 = 64 << 10
	clamp := func(x, lo, hi int64) int64 { return min(max(x/k64*k64, lo), hi) }
	s := badgerShares{
		memTable:   clamp(b/32, 1<<20, 64<<20),
		baseTable:  clamp(b/128, 256<<10, 8<<20),
		indexCache: b / 32,
		memTables:  2,
	}
	if b < backend.DefaultMemoryBudget {
		// Each memtable is an arena of 1.3 times its size: at the floor
		// of 1 MiB a second one waiting is 4% of a 32 MiB budget, which
		// the collector's headroom doubles.
		s.memTables = 1
	}
	return s
}

// budgetBlockSize is the block size of uncompressed tables (compressed
// ones: compressedBlockSize).
const budgetBlockSize = 16 << 10

// applyBudget sets bo's memory sizes from the budget b (already
// defaulted). Explicit Options sizes are applied after it and win.
func applyBudget(bo badger.Options, b int64) badger.Options {
	s := badgerSharesOf(b)
	bo = bo.
		WithMemTableSize(s.memTable).
		WithNumMemtables(s.memTables).
		WithNumLevelZeroTables(3).
		WithNumLevelZeroTablesStall(6).
		WithBaseTableSize(s.baseTable).
		WithNumCompactors(2). // the least that compacts: Badger refuses 1
		// Compression (Options.Compression, S2 unless set) comes after.
		// No block cache: a read that misses the replay cache decodes
		// its block (a few microseconds for S2's 8 KiB), where a cache
		// would cost more in its bookkeeping and garbage than its rare
		// hits save with keys read at random (the copy reads compressed
		// tables without one, patch badger/0019).
		WithBlockCacheSize(0).
		WithBlockSize(budgetBlockSize).
		WithIndexCacheSize(s.indexCache).
		WithValueThreshold(16 << 10)
	bo.TableSizeMultiplier = 1
	return bo
}
