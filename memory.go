package idem

import (
	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
)

// The memory budget (Options.MemoryBudget): how one number is split
// between Badger's memtables, caches and table builders and the Store's
// replay cache and tallies. The accounting behind the shares, and what
// they hold under sustained writes, are in docs/memory.md.

const (
	// DefaultMemoryBudget is the MemoryBudget of Options that leave it
	// zero: 64 MiB.
	DefaultMemoryBudget = 64 << 20
	// MinMemoryBudget is the least MemoryBudget a store takes: smaller
	// values are raised to it (16 MiB).
	MinMemoryBudget = 16 << 20
)

// memoryBudget returns the budget in force for the requested b: the
// default for zero or less, at least MinMemoryBudget.
func memoryBudget(b int64) int64 {
	if b <= 0 {
		return DefaultMemoryBudget
	}
	return max(b, MinMemoryBudget)
}

// storeShares are the parts of a budget the Store itself holds, on every
// backend.
type storeShares struct {
	hotBytes int64 // the replay cache's bound (hotSet.limit): B/5
	tallies  int   // records counted between two flushes: B/16 KiB, at least 1024
}

// sharesOf returns the Store's shares of the budget b (already defaulted).
func sharesOf(b int64) storeShares {
	return storeShares{hotBytes: b / 5, tallies: int(max(1024, b/(16<<10)))}
}

// badgerShares are the sizes Badger gets from a budget.
type badgerShares struct {
	memTable, baseTable, indexCache int64
}

// badgerSharesOf returns Badger's sizes for the budget b (already
// defaulted): memtables of B/32 (1 to 64 MiB), tables of B/128 (256 KiB
// to 8 MiB), an index cache of B/32.
func badgerSharesOf(b int64) badgerShares {
	const k64 = 64 << 10
	clamp := func(x, lo, hi int64) int64 { return min(max(x/k64*k64, lo), hi) }
	return badgerShares{
		memTable:   clamp(b/32, 1<<20, 64<<20),
		baseTable:  clamp(b/128, 256<<10, 8<<20),
		indexCache: b / 32,
	}
}

// applyBudget sets bo's memory sizes from the budget b (already
// defaulted). Explicit BadgerOptions sizes and Tune are applied after it
// and win.
func applyBudget(bo badger.Options, b int64) badger.Options {
	s := badgerSharesOf(b)
	bo = bo.
		WithMemTableSize(s.memTable).
		WithNumMemtables(2).
		WithNumLevelZeroTables(3).
		WithNumLevelZeroTablesStall(6).
		WithBaseTableSize(s.baseTable).
		WithNumCompactors(2). // the least that compacts: Badger refuses 1
		// Uncompressed tables: a builder then holds at most its table,
		// where zstd makes it hold its compression ratio times more (and
		// a compressed copy), and Badger reads blocks from the mapping
		// without a block cache.
		WithCompression(options.None).
		WithBlockCacheSize(0).
		WithBlockSize(16 << 10).
		WithIndexCacheSize(s.indexCache).
		WithValueThreshold(16 << 10)
	bo.TableSizeMultiplier = 1
	return bo
}

// fixBlockCache gives a compressing bo (Tune may have chosen zstd) the
// block cache Badger requires then: B/16, unless one is set.
func fixBlockCache(bo badger.Options, b int64) badger.Options {
	if bo.Compression != options.None && bo.BlockCacheSize == 0 {
		bo.BlockCacheSize = b / 16
	}
	return bo
}
