package canon

import (
	"bytes"
	"encoding/binary"
	"slices"
)

// maxSmallObject is the most members an object can have for sortMembers to
// use an insertion sort.
const maxSmallObject = 16

// member locates one object member in the canonical buffer: its encoded
// name is b[key:val], and its value runs from val to the next member's key
// or, for the last member, to the end of the buffer when the object closes.
// at is the body offset of the name, for error messages. pfx holds the
// first eight bytes of the encoded name, big-endian and zero-padded, so most
// comparisons are one integer compare.
type member struct {
	key, val, at int
	pfx          uint64
}

// compareNames orders members by their encoded names, as bytes.Compare
// would, and returns 0 exactly when the names are equal. The prefix decides
// almost every comparison; it is kept small enough to inline.
func compareNames(b []byte, x, y *member) int {
	if x.pfx != y.pfx {
		if x.pfx < y.pfx {
			return -1
		}
		return 1
	}
	return compareLongNames(b, x, y)
}

// compareLongNames compares names with equal prefixes. Names of at most
// eight encoded bytes are then equal: their first byte encodes their length,
// so the zero padding cannot be confused with text of the same length.
func compareLongNames(b []byte, x, y *member) int {
	if x.val-x.key <= 8 && y.val-y.key <= 8 {
		return 0
	}
	return bytes.Compare(b[x.key:x.val], b[y.key:y.val])
}

// namePrefix returns the pfx of the encoded name enc.
func namePrefix(enc []byte) uint64 {
	var p uint64
	for k, c := range enc[:min(len(enc), 8)] {
		p |= uint64(c) << (56 - 8*k)
	}
	return p
}

// addMember appends a member to ms. It fills the new element in place: a
// composite literal would be built on the stack and copied with wide moves
// that stall on store forwarding (see docs/fingerprint.md).
func addMember(ms []member, key, val, at int, pfx uint64) []member {
	ms = slices.Grow(ms, 1)
	ms = ms[:len(ms)+1]
	m := &ms[len(ms)-1]
	m.key, m.val, m.at, m.pfx = key, val, at, pfx
	return ms
}

// risingPrefixes reports whether the prefixes of ms strictly rise: then the
// members are in order and distinct, and need no sort.
func risingPrefixes(ms []member) bool {
	for k := 1; k < len(ms); k++ {
		if ms[k-1].pfx >= ms[k].pfx {
			return false
		}
	}
	return true
}

// sortMembers puts the members of the object that just closed, all of it at
// the end of b, in the order of their encoded names, and rejects duplicate
// names. Encoded names are equal exactly when the decoded names are. b
// must have 16 bytes of capacity after its end (see permute).
func (e *Encoder) sortMembers(b []byte, ms []member) error {
	n := len(ms)
	if n < 2 {
		return nil
	}
	if n > maxSmallObject {
		return e.sortLarge(b, ms)
	}
	// Sort member indices rather than members: ms stays in body order, so
	// member k ends where member k+1 starts. Insertion sort allocates
	// nothing and is quick on the few members of most objects.
	order := e.order[:n] // within capacity
	moved := false
	for k := range n {
		x := &ms[k]
		j := k
		for ; j > 0; j-- {
			y := &ms[order[j-1]]
			c := compareNames(b, y, x)
			if c < 0 {
				break
			}
			if c == 0 {
				return errDuplicate(b, y, x)
			}
			order[j] = order[j-1]
		}
		order[j] = k
		moved = moved || j != k
	}
	if moved {
		e.permute(b, ms, order)
	}
	return nil
}

// sortLarge is sortMembers for objects too large for an insertion sort.
func (e *Encoder) sortLarge(b []byte, ms []member) error {
	order := e.order[:0]
	for k := range ms {
		order = append(order, k)
	}
	e.order = order
	slices.SortFunc(order, func(x, y int) int { return compareNames(b, &ms[x], &ms[y]) })
	moved := false
	for k := 1; k < len(order); k++ {
		x, y := &ms[order[k-1]], &ms[order[k]]
		if compareNames(b, x, y) == 0 {
			return errDuplicate(b, x, y)
		}
		moved = moved || order[k-1] > order[k]
	}
	if moved {
		e.permute(b, ms, order)
	}
	return nil
}

// permute rewrites the members ms, which end b, in the given order.
// Members already in place at either end stay put; the rest are gathered
// in order into e.tmp and put back in one copy. b must have 16 bytes of
// capacity after its end, which the gathering may read.
func (e *Encoder) permute(b []byte, ms []member, order []int) {
	n := len(ms)
	lo, hi := 0, n
	for order[lo] == lo {
		lo++
	}
	for order[hi-1] == hi-1 {
		hi--
	}
	start, end := ms[lo].key, len(b)
	if hi < n {
		end = ms[hi].key
	}
	if mid := ms[hi-1].key; order[lo] == hi-1 && end-mid <= 16 && consecutive(order[lo+1:hi], lo) {
		// The last member moves to the front and the others stay in
		// order: typically a short member after a long one holding
		// nested values. Shifting the long run in place copies it once
		// instead of twice.
		if mid-start > 16 {
			rotate(b, start, mid, end)
			return
		}
		// Both runs fit a 16-byte move: swap them in registers. The
		// second move runs past end; the 16 bytes there are put back.
		// (Inline: a call here measured 1-2% on the refund body.)
		src := b[:cap(b)]
		first := *(*[16]byte)(src[start : start+16])
		last := *(*[16]byte)(src[mid : mid+16])
		after := *(*[16]byte)(src[end : end+16])
		*(*[16]byte)(src[start : start+16]) = last
		*(*[16]byte)(src[start+end-mid : start+end-mid+16]) = first
		*(*[16]byte)(src[end : end+16]) = after
		return
	}
	if cap(e.tmp) < end-start+16 {
		e.tmp = make([]byte, 0, 2*(end-start)+16)
	}
	tmp := e.tmp[:cap(e.tmp)]
	src := b[:cap(b)]
	w := 0
	for _, k := range order[lo:hi] {
		to := len(b)
		if k+1 < n {
			to = ms[k+1].key
		}
		copyWords(tmp[w:], src[ms[k].key:], to-ms[k].key)
		w += to - ms[k].key
	}
	copy(b[start:end], tmp[:w])
}

// rotate swaps b[start:mid] with the run b[mid:end] of at most 16 bytes
// after it.
func rotate(b []byte, start, mid, end int) {
	var last [16]byte
	copy(last[:], b[mid:end])
	copy(b[start+end-mid:end], b[start:mid])
	copy(b[start:], last[:end-mid])
}

// consecutive reports whether order is first, first+1, and so on.
func consecutive(order []int, first int) bool {
	for k, o := range order {
		if o != first+k {
			return false
		}
	}
	return true
}

// copyWords copies the first n bytes of src to dst sixteen bytes at a time,
// so it may read and write up to 15 bytes more: for the short spans of
// permute, that is cheaper than a call to memmove.
func copyWords(dst, src []byte, n int) {
	for k := 0; k < n; k += 16 {
		*(*[16]byte)(dst[k : k+16]) = *(*[16]byte)(src[k : k+16])
	}
}

// stringText returns the text of the encoded string enc.
func stringText(enc []byte) []byte {
	if enc[0] != tagString {
		return enc[1:]
	}
	_, k := binary.Uvarint(enc[1:])
	return enc[1+k:]
}
