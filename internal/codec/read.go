package codec

import (
	"encoding/binary"
	"math"
	"time"
	"unsafe"
)

// The decoder's readers of one msgpack value each, in the forms Append
// writes (and a few more that msgpack writes for the same types).

// next reads n bytes and returns them, or false if fewer are left.
func (d *decoder) next(n uint64) ([]byte, bool) {
	if n > uint64(len(d.in)-d.pos) {
		return nil, false
	}
	p := d.in[d.pos : d.pos+int(n)]
	d.pos += int(n)
	return p, true
}

// code reads a type code.
func (d *decoder) code() (byte, bool) {
	if d.pos >= len(d.in) {
		return 0, false
	}
	c := d.in[d.pos]
	d.pos++
	return c, true
}

// uint reads a big-endian unsigned integer of size bytes (1, 2, 4 or 8).
func (d *decoder) uint(size uint64) (uint64, bool) {
	p, ok := d.next(size)
	if !ok {
		return 0, false
	}
	switch size {
	case 1:
		return uint64(p[0]), true
	case 2:
		return uint64(binary.BigEndian.Uint16(p)), true
	case 4:
		return uint64(binary.BigEndian.Uint32(p)), true
	default:
		return binary.BigEndian.Uint64(p), true
	}
}

// length reads the length that follows a code, 1, 2 or 4 bytes long, as
// an int (it may not fit in 32 bits).
func (d *decoder) length(size uint64) (int, bool) {
	n, ok := d.uint(size)
	return int(n), ok && n <= math.MaxInt
}

// mapLen reads a map header (not a nil).
func (d *decoder) mapLen() (int, bool) {
	c, ok := d.code()
	switch {
	case !ok:
		return 0, false
	case c&0xf0 == mpFixMap:
		return int(c & 0x0f), true
	case c == mpMap16:
		return d.length(2)
	case c == mpMap32:
		return d.length(4)
	}
	return 0, false
}

// arrayLen reads an array header (not a nil).
func (d *decoder) arrayLen() (int, bool) {
	c, ok := d.code()
	switch {
	case !ok:
		return 0, false
	case c&0xf0 == mpFixArray:
		return int(c & 0x0f), true
	case c == mpArray16:
		return d.length(2)
	case c == mpArray32:
		return d.length(4)
	}
	return 0, false
}

// key reads a field name, a fixstr, without copying it: nil if there is
// none (no field has an empty name).
func (d *decoder) key() []byte {
	c, ok := d.code()
	if !ok || c&0xe0 != mpFixStr {
		return nil
	}
	k, _ := d.next(uint64(c & 0x1f))
	return k
}

// int reads an integer in any of its forms and returns its 64 bits, which
// the caller converts to its field's type as msgpack does: a signed form is
// sign-extended, and a field narrower than 64 bits keeps the low bits.
func (d *decoder) int() (uint64, bool) {
	c, ok := d.code()
	switch {
	case !ok:
		return 0, false
	case c <= 0x7f || c >= 0xe0: // positive and negative fixint
		return uint64(int64(int8(c))), true
	case c >= mpUint8 && c <= mpUint64:
		return d.uint(1 << (c - mpUint8))
	case c >= mpInt8 && c <= mpInt64:
		size := uint64(1) << (c - mpInt8)
		u, ok := d.uint(size)
		shift := 64 - 8*size // sign-extend
		return uint64(int64(u<<shift) >> shift), ok
	}
	return 0, false
}

// bool reads true or false.
func (d *decoder) bool() (bool, bool) {
	c, ok := d.code()
	return c == mpTrue, ok && (c == mpTrue || c == mpFalse)
}

// str reads a string (fixstr, str8, str16 or str32). It points into d.in
// until own moves it.
func (d *decoder) str() (string, bool) {
	c, ok := d.code()
	var n int
	switch {
	case !ok:
		return "", false
	case c&0xe0 == mpFixStr:
		n = int(c & 0x1f)
	case c == mpStr8:
		n, ok = d.length(1)
	case c == mpStr16:
		n, ok = d.length(2)
	case c == mpStr32:
		n, ok = d.length(4)
	default:
		return "", false
	}
	p, ok2 := d.next(uint64(n))
	if !ok || !ok2 {
		return "", false
	}
	d.size += n
	if n == 0 {
		return "", true
	}
	return unsafe.String(&p[0], n), true
}

// bin reads a byte string (bin8, bin16 or bin32). It points into d.in
// until own moves it; an empty one is empty but not nil, as
// msgpack decodes it.
func (d *decoder) bin() ([]byte, bool) {
	c, ok := d.code()
	var n int
	switch {
	case !ok:
		return nil, false
	case c == mpBin8:
		n, ok = d.length(1)
	case c == mpBin16:
		n, ok = d.length(2)
	case c == mpBin32:
		n, ok = d.length(4)
	default:
		return nil, false
	}
	p, ok2 := d.next(uint64(n))
	if !ok || !ok2 {
		return nil, false
	}
	d.size += n
	if n == 0 {
		return []byte{}, true
	}
	return p, true
}

// time reads a timestamp extension in its 4-, 8- or 12-byte form and
// builds the time as msgpack does: with time.Unix, so in time.Local, but
// the zero time, which is in UTC.
func (d *decoder) time() (time.Time, bool) {
	in := d.in[d.pos:]
	var t time.Time
	switch {
	case len(in) >= 6 && in[0] == mpFixExt4 && in[1] == mpTimeExt:
		t = time.Unix(int64(binary.BigEndian.Uint32(in[2:])), 0)
		d.pos += 6
	case len(in) >= 10 && in[0] == mpFixExt8 && in[1] == mpTimeExt:
		data := binary.BigEndian.Uint64(in[2:])
		t = time.Unix(int64(data&(1<<34-1)), int64(data>>34))
		d.pos += 10
	case len(in) >= 15 && in[0] == mpExt8 && in[1] == 12 && in[2] == mpTimeExt:
		nsec := binary.BigEndian.Uint32(in[3:])
		t = time.Unix(int64(binary.BigEndian.Uint64(in[7:])), int64(nsec))
		d.pos += 15
	default:
		return time.Time{}, false
	}
	if t.IsZero() {
		t = t.UTC()
	}
	return t, true
}
