/*
 * SPDX-FileCopyrightText: © 2017-2025 Istari Digital, Inc.
 * SPDX-License-Identifier: Apache-2.0
 */

package skl

import (
	"math/bits"
	"sync/atomic"

	"github.com/idemkit/idem/internal/badger/y"
	"github.com/idemkit/idem/internal/ristretto/z"
)

// What a skiplist keeps beside its arena for point operations, both
// indexed by a hash of the user key (the key without its version):
//
//   - a filter of the user keys put, so that Get of a key the skiplist
//     does not hold (the common read of a key not written lately) answers
//     without a descent through the list, whose every step is a cache miss
//     on a random node;
//   - a hint per user key, the predecessors of its latest version at the
//     lowest levels, so that Put of the key's next version (a value and
//     its update in the same memtable) starts at its place instead of
//     descending from the head.
//
// Neither changes what the list holds or answers. The filter has no false
// negatives: its bits are set before the node is linked. A hint is only a
// place to start a search: it is used where it is checked to be before the
// key, the search from it is bounded, and any doubt falls back to the
// descent from the head.

const (
	// filterBytesPer is how many bytes of arena one bit of the filter
	// covers: about 16 bits a key for the nodes of typical entries.
	filterBytesPer = 16
	// hintLevels is how many of the lowest levels a hint keeps: a new
	// node is taller with probability 1/81.
	hintLevels = 4
	// hintSteps bounds the search from a hint at each level.
	hintSteps = 32
	// hintBytesPer sizes the hint table: a slot per this many bytes of
	// arena, a power of two between minHints and maxHints.
	hintBytesPer = 4096
	minHints     = 256
	maxHints     = 1 << 14
)

// hint is one slot of the hint table.
type hint struct {
	tag  atomic.Uint32 // from the user key's hash, never zero once set
	prev [hintLevels]atomic.Uint32
}

// side is the filter and the hint table of a skiplist, kept by an
// ArenaPool with the arena's buffer.
type side struct {
	filter []atomic.Uint64
	hints  []hint
}

// sideSize returns the filter's words and the hint table's slots for an
// arena of n bytes.
func sideSize(n int64) (words, slots int) {
	words = int(max(n/filterBytesPer/64, 64))
	slots = minHints
	for slots < maxHints && int64(slots)*hintBytesPer < n {
		slots <<= 1
	}
	return words, slots
}

// newSide returns a zero side for an arena of n bytes.
func newSide(n int64) side {
	words, slots := sideSize(n)
	return side{filter: make([]atomic.Uint64, words), hints: make([]hint, slots)}
}

// fits reports whether s has the sizes newSide(n) gives.
func (s side) fits(n int64) bool {
	words, slots := sideSize(n)
	return len(s.filter) == words && len(s.hints) == slots
}

// clear zeroes s for the next skiplist.
func (s side) clear() {
	clear(s.filter)
	clear(s.hints)
}

// userHash hashes key's user key.
func userHash(key []byte) uint64 {
	return z.MemHash(y.ParseKey(key))
}

// filterPlace returns the filter word and the bits of hash h.
func (s *Skiplist) filterPlace(h uint64) (*atomic.Uint64, uint64) {
	w, _ := bits.Mul64(h, uint64(len(s.side.filter)))
	mask := uint64(1)<<(h&63) | uint64(1)<<(h>>6&63) | uint64(1)<<(h>>12&63)
	return &s.side.filter[w], mask
}

// mark adds hash h to the filter.
func (s *Skiplist) mark(h uint64) {
	w, mask := s.filterPlace(h)
	if w.Load()&mask != mask {
		w.Or(mask)
	}
}

// mayHold reports whether a key of hash h may have been put.
func (s *Skiplist) mayHold(h uint64) bool {
	w, mask := s.filterPlace(h)
	return w.Load()&mask == mask
}

// hintFor returns the hint slot of hash h and the tag it has for h.
func (s *Skiplist) hintFor(h uint64) (*hint, uint32) {
	return &s.side.hints[(h>>18)&uint64(len(s.side.hints)-1)], uint32(h>>32) | 1
}

// remember records prev, the predecessors of a node just linked for the
// user key of hash h, at the levels below height (prev[i] may be nil where
// unknown). Levels at or above height keep what the slot held for the
// same key: the predecessors of an older version, still before the key.
func (s *Skiplist) remember(h uint64, prev *[maxHeight + 1]*node, height int) {
	sl, tag := s.hintFor(h)
	same := sl.tag.Load() == tag
	for i := 0; i < hintLevels; i++ {
		if i >= height && same {
			continue
		}
		sl.prev[i].Store(s.arena.getNodeOffset(prev[i]))
	}
	sl.tag.Store(tag)
}

// spliceFromHint fills prev and next at the levels below height for key,
// searching from the hint of its user key (hash h). It reports false when
// it cannot: no hint for the key, a level without one, a hint not before
// the key, or a search longer than hintSteps. found is the node that
// already holds key, if the search met one.
func (s *Skiplist) spliceFromHint(key []byte, h uint64, height int,
	prev, next *[maxHeight + 1]*node) (found *node, ok bool) {
	if height > hintLevels {
		return nil, false
	}
	sl, tag := s.hintFor(h)
	if sl.tag.Load() != tag {
		return nil, false
	}
	for i := 0; i < height; i++ {
		start := s.arena.getNode(sl.prev[i].Load())
		if start == nil {
			return nil, false
		}
		if start != s.head && y.CompareKeys(key, start.key(s.arena)) <= 0 {
			return nil, false
		}
		before := start
		for steps := 0; ; steps++ {
			if steps == hintSteps {
				return nil, false
			}
			n := s.getNext(before, i)
			if n == nil {
				prev[i], next[i] = before, nil
				break
			}
			cmp := y.CompareKeys(key, n.key(s.arena))
			if cmp == 0 {
				return n, true
			}
			if cmp < 0 {
				prev[i], next[i] = before, n
				break
			}
			before = n
		}
	}
	return nil, true
}
