package idem

import "github.com/idemkit/idem/backend"

// The memory budget (Options.MemoryBudget): the Store's own shares of it,
// its replay cache and tallies, on every backend (badgerstore/memory.go
// has the engine's). The accounting behind the shares, and what
// they hold under sustained writes, are in docs/memory.md.

// storeShares are the parts of a budget the Store itself holds, on every
// backend.
type storeShares struct {
	hotBytes int64 // the replay cache's bound (hotSet.limit): see sharesOf
	tallies  int   // records counted between two flushes: B/16 KiB, at least 1024
}

// sharesOf returns the Store's shares of the budget b (already defaulted).
// The replay cache takes B/5 from the default budget up, and less below
// it, scaled by B/backend.DefaultMemoryBudget (3.2 MiB at 32 MiB, 0.8 MiB at
// 16): Badger's parts do not shrink below their floors (1 MiB memtables,
// 256 KiB tables) nor its per-table memory with the budget, and the
// collector's headroom doubles whatever is live, so a small budget keeps
// its resident memory near the budget only by caching less.
func sharesOf(b int64) storeShares {
	hot := b / 5
	if b < backend.DefaultMemoryBudget {
		hot = hot * b / backend.DefaultMemoryBudget
	}
	return storeShares{hotBytes: hot, tallies: int(max(1024, b/(16<<10)))}
}
