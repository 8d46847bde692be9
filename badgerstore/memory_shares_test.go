package badgerstore

import "testing"

// The pooled table builders' allocators stay within 4 MiB, and within
// 2 to 6 of them, at every budget.
func TestBadgerShares_AllocatorsPooled(t *testing.T) {
	for b := int64(8 << 20); b <= 16<<30; b *= 2 {
		s := badgerSharesOf(b)
		held := int64(s.allocators) * 2 * s.baseTable
		if s.allocators < 2 || s.allocators > 6 || (s.allocators > 2 && held > 4<<20) {
			t.Errorf("budget %d MiB: %d allocators of %d KiB", b>>20, s.allocators, 2*s.baseTable>>10)
		}
	}
	if s := badgerSharesOf(64 << 20); s.allocators != 4 {
		t.Errorf("default budget: %d allocators, want 4 (1 MiB each)", s.allocators)
	}
}

// Level 0 is compacted at 3 to 8 tables, and at most 16 MiB of memtables
// beyond Badger's 3.
func TestBadgerShares_Level0(t *testing.T) {
	for b := int64(8 << 20); b <= 16<<30; b *= 2 {
		s := badgerSharesOf(b)
		if s.level0 < 3 || s.level0 > 8 || (s.level0 > 3 && int64(s.level0)*s.memTable > 16<<20) {
			t.Errorf("budget %d MiB: level 0 at %d tables of %d MiB memtables", b>>20, s.level0, s.memTable>>20)
		}
	}
	if s := badgerSharesOf(64 << 20); s.level0 != 8 {
		t.Errorf("default budget: level 0 at %d tables, want 8", s.level0)
	}
}
