package badgerstore

import (
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/internal/badger"
)

// badgerShares are the sizes Badger gets from a budget.
type badgerShares struct {
	memTable, baseTable, indexCache int64
	memTables                       int // NumMemtables: those that may wait to be flushed
	allocators                      int // NumAllocatorsPooled
	level0                          int // NumLevelZeroTables (the stall at twice it)
}

// badgerSharesOf returns Badger's sizes for the budget b (already
// defaulted): memtables of B/32 (1 to 64 MiB), two of them waiting to be
// flushed at most, one below the default budget; tables of B/128 (256 KiB
// to 8 MiB); an index cache of B/32; table builders' allocators (2 x
// the table size each) kept up to 4 MiB, 2 to 6 of them; level 0
// compacted at 16 MiB of memtables' flushes (3 to 8 tables).
func badgerSharesOf(b int64) badgerShares {
	const k64 = 64 << 10
	clamp := func(x, lo, hi int64) int64 { return min(max(x/k64*k64, lo), hi) }
	s := badgerShares{
		memTable:   clamp(b/32, 1<<20, 64<<20),
		baseTable:  clamp(b/128, 256<<10, 8<<20),
		indexCache: b / 32,
		memTables:  2,
	}
	// At 32 goroutines, flushes and compactions (with their splits) build
	// up to about ten tables at once: with the 2 Badger keeps, one table in
	// four made a new allocator, about 0.75 KB allocated and zeroed per
	// durable cycle. A pooled allocator is held only while tables are
	// built: Badger releases one every two seconds without a builder.
	s.allocators = int(min(max((4<<20)/(2*s.baseTable), 2), 6))
	// Keys are random, so a compaction of level 0 rewrites the whole base
	// level (up to BaseLevelSize, 10 MiB) with it: at 3 tables of a 2 MiB
	// memtable each (about 0.2 MiB once flushed: a claim's record and
	// index entry are superseded within the memtable, and blocks are
	// compressed) that wrote the base level again for every 0.7 MiB
	// flushed. At 8, a durable cycle wrote 2.4 KB to the disk rather than
	// 3.5 KB, the log included (bench/results/notes/engine-runs.md). Large memtables keep
	// Badger's 3: level 0 then holds as much before its compaction.
	s.level0 = int(min(max((16<<20)/s.memTable, 3), 8))
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
		WithNumLevelZeroTables(s.level0).
		WithNumLevelZeroTablesStall(2 * s.level0).
		WithBaseTableSize(s.baseTable).
		WithNumCompactors(2). // the least that compacts: Badger refuses 1
		WithNumAllocatorsPooled(s.allocators).
		// Compression (Options.Compression, S2 unless set) comes after.
		// No block cache: a read that misses the replay cache decodes
		// its block (one or two microseconds for S2's 4 KiB), where a cache
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
