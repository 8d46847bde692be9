package idem

import (
	"encoding/binary"
	"math"
	"time"
	"unsafe"
)

// UnmarshalRecord's fast path, for the format that record_codec.go
// describes. It reads the record in one pass, its strings and body still
// in the input, then copies those into one allocation of their exact size
// and the record into another (a recordBox): a record takes two
// allocations, more for attempts past the first and for headers.

// recordDecoder reads a record in the forms appendRecord writes. Every
// method reports false, having read an unknown amount, on input it does not
// handle, whether corrupt or merely in another form msgpack accepts; the
// caller then leaves the input to msgpack. No method panics.
type recordDecoder struct {
	in  []byte // the encoding
	pos int    // offset in in of the next byte to read
	// size is the length of the strings and the body read so far, and of
	// the header's names and values: all of it goes to mem.
	size int
	// headerAt is the offset in in of the result's header map, or -1; it
	// is read again once mem is allocated. headerValues counts its values.
	headerAt, headerValues int
	// mem holds the strings and the body of the record decoded: own
	// appends them, within its capacity. A string points into it, at bytes
	// that are never written again, and the body is a slice of it whose
	// capacity ends where it does, so the strings stay immutable.
	mem []byte
}

// decodeRecord decodes in, reporting false if it is not in the forms
// appendRecord writes (or not a record at all). Fields it does not know,
// or a field twice, are left to msgpack too, as is any other form of a
// value: so what it decodes is what msgpack.Unmarshal decodes.
func decodeRecord(in []byte) (*Record, bool) {
	d := recordDecoder{in: in, headerAt: -1}
	n, ok := d.mapLen()
	if !ok {
		return nil, false
	}
	var (
		r         Record
		res       Result
		hasResult bool
		one       Attempt // the attempt, if only one
		single    bool
		seen      uint32
	)
	for range n {
		k, ok := d.key()
		if !ok {
			return nil, false
		}
		var bit uint32
		var u uint64
		switch string(k) {
		case "v":
			bit = 1 << 0
			u, ok = d.int()
			r.Format = uint8(u)
		case "sc":
			bit = 1 << 1
			r.Scope, ok = d.str()
		case "k":
			bit = 1 << 2
			r.Key, ok = d.str()
		case "st":
			bit = 1 << 3
			u, ok = d.int()
			r.State = State(u)
		case "fp":
			bit = 1 << 4
			r.Fingerprint, ok = d.str()
		case "tk":
			bit = 1 << 5
			r.Token, ok = d.int()
		case "le":
			bit = 1 << 6
			r.LeaseEnds, ok = d.time()
		case "ex":
			bit = 1 << 7
			r.ExpiresAt, ok = d.time()
		case "rt":
			bit = 1 << 8
			u, ok = d.int()
			r.Retention = time.Duration(u)
		case "r":
			bit = 1 << 9
			ok, hasResult = d.result(&res), true
		case "fs":
			bit = 1 << 10
			r.FirstSeen, ok = d.time()
		case "ca":
			bit = 1 << 11
			r.ClaimedAt, ok = d.time()
		case "da":
			bit = 1 << 12
			r.DoneAt, ok = d.time()
		case "cl":
			bit = 1 << 13
			u, ok = d.int()
			r.Claims = int(int64(u))
		case "ck":
			bit = 1 << 14
			u, ok = d.int()
			r.Checks = int(int64(u))
		case "nc":
			bit = 1 << 15
			r.NextCheck, ok = d.time()
		case "at":
			bit = 1 << 16
			r.Attention, ok = d.bool()
		case "rc":
			bit = 1 << 17
			r.Recovered, ok = d.str()
		case "ow":
			bit = 1 << 18
			r.Owner, ok = d.str()
		case "a":
			bit = 1 << 19
			r.Attempts, single, ok = d.attempts(&one)
		case "rp":
			bit = 1 << 20
			u, ok = d.int()
			r.Replays = int64(u)
		case "lr":
			bit = 1 << 21
			r.LastReplay, ok = d.time()
		case "cf":
			bit = 1 << 22
			u, ok = d.int()
			r.Conflicts = int64(u)
		case "mm":
			bit = 1 << 23
			u, ok = d.int()
			r.Mismatches = int64(u)
		case "lj":
			bit = 1 << 24
			r.LastRejection, ok = d.time()
		default:
			return nil, false
		}
		if !ok || seen&bit != 0 {
			return nil, false
		}
		seen |= bit
	}

	// Move the strings and the body out of in, into mem.
	d.mem = make([]byte, 0, d.size)
	for _, s := range [...]*string{&r.Scope, &r.Key, &r.Fingerprint, &r.Recovered, &r.Owner, &res.Error} {
		d.own(s)
	}
	if res.Body != nil {
		start := len(d.mem)
		d.mem = append(d.mem, res.Body...)
		res.Body = d.mem[start:len(d.mem):len(d.mem)]
	}
	if d.headerAt >= 0 {
		res.Header = d.readHeader()
	}
	d.ownAttempt(&one)
	for i := range r.Attempts {
		d.ownAttempt(&r.Attempts[i])
	}
	var resp *Result
	if hasResult {
		resp = &res
	}
	var onep *Attempt
	if single {
		onep = &one
	}
	return boxRecord(&r, resp, onep), true
}

// own moves s into d.mem.
func (d *recordDecoder) own(s *string) {
	if len(*s) == 0 {
		return
	}
	start := len(d.mem)
	d.mem = append(d.mem, *s...)
	*s = unsafe.String(&d.mem[start], len(*s))
}

// ownAttempt moves a's strings into d.mem.
func (d *recordDecoder) ownAttempt(a *Attempt) {
	d.own(&a.Owner)
	d.own(&a.Outcome)
	d.own(&a.Reason)
}

// result decodes a result's map into res.
func (d *recordDecoder) result(res *Result) bool {
	n, ok := d.mapLen()
	if !ok {
		return false
	}
	var seen uint8
	for range n {
		k, ok := d.key()
		if !ok {
			return false
		}
		var bit uint8
		var u uint64
		switch string(k) {
		case "s":
			bit = 1 << 0
			u, ok = d.int()
			res.Status = int(int64(u))
		case "h":
			bit = 1 << 1
			ok = d.header()
		case "b":
			bit = 1 << 2
			res.Body, ok = d.bin()
		case "e":
			bit = 1 << 3
			res.Error, ok = d.str()
		case "t":
			bit = 1 << 4
			res.Truncated, ok = d.bool()
		default:
			return false
		}
		if !ok || seen&bit != 0 {
			return false
		}
		seen |= bit
	}
	return true
}

// header reads a header map, only to check it and measure it: readHeader
// builds it, once d.mem is allocated.
func (d *recordDecoder) header() bool {
	d.headerAt = d.pos
	n, ok := d.mapLen()
	if !ok || n > (len(d.in)-d.pos)/2 { // each entry takes 2 bytes at least
		return false
	}
	for range n {
		_, ok := d.str()
		m, ok2 := d.values()
		if !ok || !ok2 {
			return false
		}
		for range m {
			if _, ok := d.str(); !ok {
				return false
			}
		}
		d.headerValues += max(m, 0)
	}
	return true
}

// readHeader reads the header map that header checked. As msgpack does,
// it keeps the last values of a name given twice, and decodes nil values
// as a nil slice. The values share one backing array, each slice's
// capacity ending at its length.
func (d *recordDecoder) readHeader() map[string][]string {
	d.pos = d.headerAt
	n, _ := d.mapLen()
	h := make(map[string][]string, n)
	values := make([]string, d.headerValues)
	for range n {
		k, _ := d.str()
		d.own(&k)
		m, _ := d.values()
		if m < 0 {
			h[k] = nil
			continue
		}
		vs := values[:m:m]
		values = values[m:]
		for i := range vs {
			vs[i], _ = d.str()
			d.own(&vs[i])
		}
		h[k] = vs
	}
	return h
}

// values reads the length of a header's values: -1 for nil.
func (d *recordDecoder) values() (int, bool) {
	if d.pos < len(d.in) && d.in[d.pos] == mpNil {
		d.pos++
		return -1, true
	}
	m, ok := d.arrayLen()
	return m, ok && m <= len(d.in)-d.pos // each value takes a byte at least
}

// attempts decodes the array of attempts: a single one into one, with a
// nil slice.
func (d *recordDecoder) attempts(one *Attempt) (as []Attempt, single, ok bool) {
	n, ok := d.arrayLen()
	switch {
	case !ok || n > len(d.in)-d.pos: // each attempt takes a byte at least
		return nil, false, false
	case n == 1:
		return nil, true, d.attempt(one)
	}
	as = make([]Attempt, n)
	for i := range as {
		if !d.attempt(&as[i]) {
			return nil, false, false
		}
	}
	return as, false, true
}

// attempt decodes one attempt's map into a.
func (d *recordDecoder) attempt(a *Attempt) bool {
	n, ok := d.mapLen()
	if !ok {
		return false
	}
	var seen uint8
	for range n {
		k, ok := d.key()
		if !ok {
			return false
		}
		var bit uint8
		var u uint64
		switch string(k) {
		case "t":
			bit = 1 << 0
			a.Token, ok = d.int()
		case "c":
			bit = 1 << 1
			a.ClaimedAt, ok = d.time()
		case "o":
			bit = 1 << 2
			a.Owner, ok = d.str()
		case "e":
			bit = 1 << 3
			a.EndedAt, ok = d.time()
		case "x":
			bit = 1 << 4
			a.Outcome, ok = d.str()
		case "r":
			bit = 1 << 5
			a.Reason, ok = d.str()
		case "s":
			bit = 1 << 6
			u, ok = d.int()
			a.Status = int(int64(u))
		default:
			return false
		}
		if !ok || seen&bit != 0 {
			return false
		}
		seen |= bit
	}
	return true
}

// next reads n bytes and returns them, or false if fewer are left.
func (d *recordDecoder) next(n uint64) ([]byte, bool) {
	if n > uint64(len(d.in)-d.pos) {
		return nil, false
	}
	p := d.in[d.pos : d.pos+int(n)]
	d.pos += int(n)
	return p, true
}

// code reads a type code.
func (d *recordDecoder) code() (byte, bool) {
	if d.pos >= len(d.in) {
		return 0, false
	}
	c := d.in[d.pos]
	d.pos++
	return c, true
}

// uint reads a big-endian unsigned integer of size bytes (1, 2, 4 or 8).
func (d *recordDecoder) uint(size uint64) (uint64, bool) {
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
func (d *recordDecoder) length(size uint64) (int, bool) {
	n, ok := d.uint(size)
	return int(n), ok && n <= math.MaxInt
}

// mapLen reads a map header (not a nil).
func (d *recordDecoder) mapLen() (int, bool) {
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
func (d *recordDecoder) arrayLen() (int, bool) {
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

// key reads a field name, a fixstr, without copying it.
func (d *recordDecoder) key() ([]byte, bool) {
	c, ok := d.code()
	if !ok || c&0xe0 != mpFixStr {
		return nil, false
	}
	return d.next(uint64(c & 0x1f))
}

// int reads an integer in any of its forms and returns its 64 bits, which
// the caller converts to its field's type as msgpack does: a signed form is
// sign-extended, and a field narrower than 64 bits keeps the low bits.
func (d *recordDecoder) int() (uint64, bool) {
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
func (d *recordDecoder) bool() (bool, bool) {
	c, ok := d.code()
	return c == mpTrue, ok && (c == mpTrue || c == mpFalse)
}

// str reads a string (fixstr, str8, str16 or str32). It points into d.in
// until own moves it.
func (d *recordDecoder) str() (string, bool) {
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
// until decodeRecord moves it; an empty one is empty but not nil, as
// msgpack decodes it.
func (d *recordDecoder) bin() ([]byte, bool) {
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
func (d *recordDecoder) time() (time.Time, bool) {
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
