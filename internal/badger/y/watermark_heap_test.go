//go:build upstream

package y

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestUint64Heap checks the typed heap against a sorted slice: every pop
// returns the least index held, through random pushes and pops.
func TestUint64Heap(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var h uint64Heap
	var want []uint64
	for step := range 100_000 {
		if len(want) == 0 || r.IntN(3) > 0 {
			x := r.Uint64N(1000) + 1<<40 // repeats, and above 255
			h.push(x)
			want = append(want, x)
			continue
		}
		slices.Sort(want)
		if got := h.pop(); got != want[0] {
			t.Fatalf("step %d: pop %d, want %d", step, got, want[0])
		}
		want = want[1:]
		if len(h) != len(want) {
			t.Fatalf("step %d: %d held, want %d", step, len(h), len(want))
		}
	}
}

// TestUint64HeapAllocs: a push and a pop allocate nothing once the
// heap's array has room.
func TestUint64HeapAllocs(t *testing.T) {
	h := make(uint64Heap, 0, 16)
	if a := testing.AllocsPerRun(1000, func() {
		h.push(1 << 40)
		h.push(1<<40 + 1)
		h.pop()
		h.pop()
	}); a != 0 {
		t.Fatalf("%.1f allocations", a)
	}
}
