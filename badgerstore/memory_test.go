package badgerstore_test

import (
	"fmt"
	"math"
	"runtime"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/badgerstore"
	"github.com/idemkit/idem/internal/badger"
	"github.com/idemkit/idem/internal/badger/options"
	"github.com/idemkit/idem/internal/badger/table"
	"github.com/idemkit/idem/internal/badger/y"
	"github.com/stretchr/testify/require"
)

// badgerOpts opens a store with o and returns the options Badger runs with.
func badgerOpts(t *testing.T, o *idem.Options, bo ...badgerstore.Options) (*idem.Store, badger.Options) {
	t.Helper()
	s := openStoreWith(t, t.TempDir(), o, append(bo, badgerstore.Options{})[0])
	return s, badgerstore.BadgerDB(s.Backend().(*badgerstore.Backend)).Opts()
}

// What Badger's options hold at most, live, by the accounting of
// docs/memory.md: every memtable's arena (the mutable one, those queued and
// one being flushed, each with Badger's 15% slack), the caches, and the
// table builders of twice a table each: with the patched Badger, at most
// 5 splits and 2 tables being written per compaction, and the allocator
// pool's 2.
func badgerBound(bo badger.Options) int64 {
	memtables := int64(bo.NumMemtables+2) * bo.MemTableSize * 115 / 100
	builders := int64(bo.NumCompactors*(5+2)+2) * 2 * bo.BaseTableSize
	return memtables + bo.BlockCacheSize + bo.IndexCacheSize + builders
}

func TestMemoryBudget_SmallBudgetBoundsBadger(t *testing.T) {
	for _, budget := range []int64{backend.MinMemoryBudget, 32 << 20, backend.DefaultMemoryBudget} {
		s, bo := badgerOpts(t, &idem.Options{MemoryBudget: budget})
		require.Equal(t, budget, s.Options().MemoryBudget)
		// The Store's own shares: the replay cache's fifth (scaled by
		// B/64 MiB below the default) and the tallies.
		own := budget/5*budget/backend.DefaultMemoryBudget*5/4 + budget/(16<<10)*256
		require.LessOrEqual(t, badgerBound(bo)+own, budget, "budget %d: %+v", budget, bo)
		// One memtable may wait for its flush below the default budget, two from it.
		require.Equal(t, map[bool]int{true: 1, false: 2}[budget < backend.DefaultMemoryBudget], bo.NumMemtables)
		require.Equal(t, options.Snappy, bo.Compression)
		require.Zero(t, bo.BlockCacheSize)
		require.Equal(t, 2, bo.NumCompactors)
		require.Equal(t, 1, bo.TableSizeMultiplier)
	}

	// The default budget sizes the store the same as asking for it.
	s, def := badgerOpts(t, nil)
	require.Equal(t, int64(backend.DefaultMemoryBudget), s.Options().MemoryBudget)
	_, asked := badgerOpts(t, &idem.Options{MemoryBudget: backend.DefaultMemoryBudget})
	require.Equal(t, asked.MemTableSize, def.MemTableSize)
	require.Equal(t, asked.BaseTableSize, def.BaseTableSize)
	require.Equal(t, asked.IndexCacheSize, def.IndexCacheSize)

	// A larger budget gives Badger more.
	_, big := badgerOpts(t, &idem.Options{MemoryBudget: 256 << 20})
	require.Greater(t, big.MemTableSize, def.MemTableSize)
	require.Greater(t, big.BaseTableSize, def.BaseTableSize)
}

func TestMemoryBudget_RaisedToTheFloor(t *testing.T) {
	s, bo := badgerOpts(t, &idem.Options{MemoryBudget: 1 << 20})
	require.Equal(t, int64(backend.MinMemoryBudget), s.Options().MemoryBudget)
	_, floor := badgerOpts(t, &idem.Options{MemoryBudget: backend.MinMemoryBudget})
	require.Equal(t, floor.MemTableSize, bo.MemTableSize)
	require.Equal(t, floor.IndexCacheSize, bo.IndexCacheSize)
}

func TestMemoryBudget_ExplicitSizesWin(t *testing.T) {
	_, bo := badgerOpts(t, &idem.Options{MemoryBudget: 32 << 20}, badgerstore.Options{
		MemTableSize: 8 << 20, BlockCacheSize: 3 << 20, ValueThreshold: 4 << 10,
	})
	require.Equal(t, int64(8<<20), bo.MemTableSize)
	require.Equal(t, int64(3<<20), bo.BlockCacheSize)
	require.Equal(t, int64(4<<10), bo.ValueThreshold)
	require.Equal(t, options.Snappy, bo.Compression)

	// zstd, read with no block cache.
	dir := t.TempDir()
	s := openStoreWith(t, dir, &idem.Options{MemoryBudget: 32 << 20}, badgerstore.Options{Compression: badgerstore.CompressionZstd})
	bo = badgerstore.BadgerDB(s.Backend().(*badgerstore.Backend)).Opts()
	require.Equal(t, options.ZSTD, bo.Compression)
	require.Zero(t, bo.BlockCacheSize)
	_, _, err := s.Do(bg, idem.Request{Key: "k"}, ok("body"))
	require.NoError(t, err)
	require.NoError(t, s.Close()) // flushes a zstd table

	// A store written with zstd opens, and replays, uncompressed; then with S2.
	s = openStoreWith(t, dir, &idem.Options{MemoryBudget: 32 << 20}, badgerstore.Options{Compression: badgerstore.CompressionNone})
	bo = badgerstore.BadgerDB(s.Backend().(*badgerstore.Backend)).Opts()
	require.Equal(t, options.None, bo.Compression)
	require.Zero(t, bo.BlockCacheSize)
	res, replayed, err := s.Do(bg, idem.Request{Key: "k"}, ok("other"))
	require.NoError(t, err)
	require.True(t, replayed)
	require.Equal(t, "body", string(res.Body))
	_, _, err = s.Do(bg, idem.Request{Key: "k2"}, ok("body2"))
	require.NoError(t, err)
	require.NoError(t, s.Close()) // flushes an uncompressed table
	s = openStore(t, dir, &idem.Options{MemoryBudget: 32 << 20})
	for k, body := range map[string]string{"k": "body", "k2": "body2"} {
		res, replayed, err = s.Do(bg, idem.Request{Key: k}, ok("other"))
		require.NoError(t, err)
		require.True(t, replayed)
		require.Equal(t, body, string(res.Body))
	}

	// An unknown compression is refused.
	_, err = badgerstore.Open(t.TempDir(), badgerstore.Options{Compression: badgerstore.CompressionNone + 1})
	require.ErrorContains(t, err, "unknown Compression 3")
}

func TestMemoryBudget_OpenBadgerTakesItsOwn(t *testing.T) {
	b, err := badgerstore.Open(t.TempDir(), badgerstore.Options{MemoryBudget: 128 << 20})
	require.NoError(t, err)
	defer b.Close()
	_, def := badgerOpts(t, nil)
	require.Equal(t, 2*def.MemTableSize, badgerstore.BadgerDB(b).Opts().MemTableSize)
}

// The Badger idem builds with is its own copy, internal/badger: its
// table builder compresses each block as it is finished and keeps only
// the compressed bytes (PATCHES.md, badger/0018). Released Badger keeps
// every block uncompressed until the table is written, and counts only
// the compressed bytes against the table's size: a table of data that
// compresses well holds many times its size in memory, and the test
// fails.
func TestMemoryBudget_PatchedBadgerBoundsItsBuilders(t *testing.T) {
	const tableSize = 1 << 20
	value := make([]byte, 1<<10) // zeros: compressed tens of times
	keys := make([][]byte, 16*tableSize/len(value))
	for i := range keys {
		keys[i] = y.KeyWithTs([]byte(fmt.Sprintf("key%08d", i)), 1)
	}
	for _, c := range []options.CompressionType{options.Snappy, options.ZSTD} {
		// The bytes allocated in the process while 16 MiB of blocks are
		// added: the fewest of three tries, since other tests' goroutines
		// allocate beside it. The copy's builder allocates its first
		// buffer (twice the table's size, or none from its pool) and
		// little else; released Badger's holds all 16 MiB.
		least := uint64(math.MaxUint64)
		for range 3 {
			b := table.NewTableBuilder(table.Options{
				TableSize: tableSize, BlockSize: 16 << 10, BloomFalsePositive: 0.01,
				Compression: c, ZSTDCompressionLevel: 1,
			})
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for _, key := range keys {
				b.Add(key, y.ValueStruct{Value: value}, 0)
			}
			runtime.ReadMemStats(&after)
			b.Close()
			least = min(least, after.TotalAlloc-before.TotalAlloc)
		}
		require.Less(t, least, uint64(8*tableSize), "compression %v: %d bytes allocated for 16 MiB of blocks: is the Badger copy's patch gone?", c, least)
	}
}
