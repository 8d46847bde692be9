//go:build upstream

package y

import (
	"encoding/binary"
	"testing"
)

// TestBloomFalsePositiveRate builds a filter of 100,000 keys for each
// false positive rate asked and counts how many of 200,000 other keys it
// answers "maybe" for: at most 1.3 times the rate asked (the filter rounds
// its bits per key up, its probes down). Released Badger's BloomBitsPerKey
// gave 7 bits per key for 1%, and 3.6% of the other keys passed.
func TestBloomFalsePositiveRate(t *testing.T) {
	key := func(i int) []byte {
		// Keys of the shape a store holds: a prefix and a counter.
		return binary.BigEndian.AppendUint64([]byte("r\x00order-"), uint64(i))
	}
	const n, probes = 100_000, 200_000
	hashes := make([]uint32, n)
	for i := range hashes {
		hashes[i] = Hash(key(i))
	}
	for _, fp := range []float64{0.1, 0.01, 0.001} {
		f := NewFilter(hashes, BloomBitsPerKey(n, fp))
		for i := range n {
			if !f.MayContainKey(key(i)) {
				t.Fatalf("fp %v: a key the filter holds is refused", fp)
			}
		}
		passed := 0
		for i := n; i < n+probes; i++ {
			if f.MayContainKey(key(i)) {
				passed++
			}
		}
		if got := float64(passed) / probes; got > 1.3*fp {
			t.Errorf("fp %v: %.4f of the keys not held pass (%d bits a key)", fp, got, BloomBitsPerKey(n, fp))
		}
	}
	if BloomBitsPerKey(1, 0.01) != BloomBitsPerKey(1_000_000, 0.01) {
		t.Error("the bits per key depend on the number of keys")
	}
}
