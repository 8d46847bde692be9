package backend

// The memory budget: one number bounds what a store holds in the host
// process, split between the Store's own parts (its replay cache and
// counts) and the backend's (Badger's memtables, caches and table
// builders under the embedded store). docs/memory.md has the split.
const (
	// DefaultMemoryBudget is the budget of options that leave it zero:
	// 64 MiB.
	DefaultMemoryBudget = 64 << 20
	// MinMemoryBudget is the least budget a store takes: smaller values
	// are raised to it (16 MiB).
	MinMemoryBudget = 16 << 20
)

// MemoryBudget returns the budget in force for a requested b: the default
// for zero or less, at least MinMemoryBudget.
func MemoryBudget(b int64) int64 {
	if b <= 0 {
		return DefaultMemoryBudget
	}
	return max(b, MinMemoryBudget)
}
