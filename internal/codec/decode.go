package codec

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"time"
	"unsafe"
)

// Unmarshal decodes a record written in this or an earlier format. Bytes
// that are not a record, a record of a newer format, of an unknown state,
// or done without a result give a *CorruptError, never a panic. Bytes
// after the record are ignored, as msgpack ignores them.
//
// The fast path (decodeFast) reads the forms that Append writes; any other
// form that msgpack reads goes to msgpack (fallback.go), so that nothing
// msgpack reads is refused or read differently.
func Unmarshal(b []byte) (rec *Record, err error) {
	return UnmarshalInto(b, nil)
}

// UnmarshalInto is Unmarshal into sp, if not nil: a record the fast path
// reads is put in sp, and only its strings and body are allocated; one in
// another form comes in a new allocation, as Unmarshal returns it. The
// record returned is valid until sp is decoded into again.
func UnmarshalInto(b []byte, sp *Space) (rec *Record, err error) {
	// msgpack panics on some malformed input (a nil where a struct is
	// expected, found by FuzzUnmarshalRecord).
	defer func() {
		if v := recover(); v != nil {
			rec, err = nil, &CorruptError{Reason: fmt.Sprintf("undecodable record: %v", v)}
		}
	}()
	// A record of format 2 or later ends with the checksum of its map. One
	// whose checksum fails is read whole, as format 1 (which had none):
	// it must then say format 1, which no flipped bit of the version 2
	// makes it say.
	r, err := decode(b[:max(0, len(b)-sumLen)], sp)
	if !sealed(b) || err != nil || r.Format < 2 {
		if r, err = decode(b, sp); err != nil {
			return nil, err
		}
		if r.Format >= 2 {
			return nil, &CorruptError{Reason: "checksum mismatch"}
		}
	}
	switch {
	case r.Format == 0 || r.Format > Format:
		return nil, &CorruptError{Reason: fmt.Sprintf("unknown format version %d", r.Format)}
	case r.State != stateInProgress && r.State != stateDone && r.State != stateReleased:
		return nil, &CorruptError{Reason: fmt.Sprintf("unknown state %d", r.State)}
	case r.State == stateDone && r.Result == nil:
		return nil, &CorruptError{Reason: "done record without a result"}
	}
	return r, nil
}

// sealed reports whether b ends with the checksum of what precedes it.
func sealed(b []byte) bool {
	n := len(b) - sumLen
	return n > 0 && crc32.Checksum(b[:n], castagnoli) == binary.BigEndian.Uint32(b[n:])
}

// decode decodes one map, by the fast path or else by msgpack.
func decode(b []byte, sp *Space) (*Record, error) {
	if r, ok := decodeFast(b, sp); ok {
		return r, nil
	}
	return decodeMsgpack(b)
}

// decoder is the fast path. It reads the record in one pass, its strings
// and body still in the input, then copies those into one allocation of
// their exact size, and the record, its result and its only attempt into
// another (Box).
//
// Every method reports false, having read an unknown amount, on input it
// does not handle, whether corrupt or merely in another form msgpack
// accepts: Unmarshal then leaves the input to msgpack. No method panics.
type decoder struct {
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

// decodeFast decodes in, reporting false if it is not in the forms Append
// writes, or not a record at all. A field it does not know, or a field
// twice, is left to msgpack too.
//
// Its switch over the fields writes to local variables: moved to a
// function that writes through a pointer, decoding was 5 to 10% slower
// (a write barrier for every string and time).
func decodeFast(in []byte, sp *Space) (*Record, bool) {
	d := decoder{in: in, headerAt: -1}
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
		var bit uint32
		var u uint64
		switch string(d.key()) {
		case "v":
			u, ok = d.int()
			r.Format = uint8(u)
			bit = 1 << 0
		case "sc":
			r.Scope, ok = d.str()
			bit = 1 << 1
		case "k":
			r.Key, ok = d.str()
			bit = 1 << 2
		case "st":
			u, ok = d.int()
			r.State = uint8(u)
			bit = 1 << 3
		case "fp":
			r.Fingerprint, ok = d.str()
			bit = 1 << 4
		case "tk":
			r.Token, ok = d.int()
			bit = 1 << 5
		case "le":
			r.LeaseEnds, ok = d.time()
			bit = 1 << 6
		case "ex":
			r.ExpiresAt, ok = d.time()
			bit = 1 << 7
		case "rt":
			u, ok = d.int()
			r.Retention = time.Duration(u)
			bit = 1 << 8
		case "r":
			bit, ok, hasResult = 1<<9, d.result(&res), true
		case "fs":
			r.FirstSeen, ok = d.time()
			bit = 1 << 10
		case "ca":
			r.ClaimedAt, ok = d.time()
			bit = 1 << 11
		case "da":
			r.DoneAt, ok = d.time()
			bit = 1 << 12
		case "cl":
			u, ok = d.int()
			r.Claims = int(int64(u))
			bit = 1 << 13
		case "ck":
			u, ok = d.int()
			r.Checks = int(int64(u))
			bit = 1 << 14
		case "nc":
			r.NextCheck, ok = d.time()
			bit = 1 << 15
		case "at":
			r.Attention, ok = d.bool()
			bit = 1 << 16
		case "tw":
			r.MayHaveRunTwice, ok = d.bool()
			bit = 1 << 25
		case "rc":
			r.Recovered, ok = d.str()
			bit = 1 << 17
		case "ow":
			r.Owner, ok = d.str()
			bit = 1 << 18
		case "a":
			r.Attempts, single, ok = d.attempts(&one)
			bit = 1 << 19
		case "rp":
			u, ok = d.int()
			r.Replays = int64(u)
			bit = 1 << 20
		case "lr":
			r.LastReplay, ok = d.time()
			bit = 1 << 21
		case "cf":
			u, ok = d.int()
			r.Conflicts = int64(u)
			bit = 1 << 22
		case "mm":
			u, ok = d.int()
			r.Mismatches = int64(u)
			bit = 1 << 23
		case "lj":
			r.LastRejection, ok = d.time()
			bit = 1 << 24
		default:
			return nil, false
		}
		if !ok || seen&bit != 0 {
			return nil, false
		}
		seen |= bit
	}
	return d.finish(&r, &res, hasResult, &one, single, sp), true
}

// finish moves the record's strings out of d.in and boxes it, with res if
// it has a result and one if it has a single attempt: in sp if not nil,
// else in a new box.
func (d *decoder) finish(r *Record, res *Result, hasResult bool, one *Attempt, single bool, sp *Space) *Record {
	if !hasResult {
		res = nil
	}
	if !single {
		one = nil
	}
	d.own(r, res, one)
	if sp != nil {
		return (*resultRecordBox)(sp).fill(r, res, one)
	}
	return Box(r, res, one)
}

// own moves the strings and the body of r, res and one out of d.in, into
// d.mem, and builds the result's header there.
func (d *decoder) own(r *Record, res *Result, one *Attempt) {
	d.mem = make([]byte, 0, d.size)
	for _, s := range [...]*string{&r.Scope, &r.Key, &r.Fingerprint, &r.Recovered, &r.Owner} {
		d.ownString(s)
	}
	if res != nil {
		d.ownResult(res)
	}
	if one != nil {
		d.ownAttempt(one)
	}
	for i := range r.Attempts {
		d.ownAttempt(&r.Attempts[i])
	}
}

// ownResult moves res's error and body into d.mem and builds its header
// there.
func (d *decoder) ownResult(res *Result) {
	d.ownString(&res.Error)
	if res.Body != nil {
		start := len(d.mem)
		d.mem = append(d.mem, res.Body...)
		res.Body = d.mem[start:len(d.mem):len(d.mem)]
	}
	if d.headerAt >= 0 {
		res.Header = d.readHeader()
	}
}

// UnmarshalResult decodes a result encoded alone (AppendResult, or
// msgpack.Marshal of a Result): by the fast path when it is in the form
// AppendResult writes, else by msgpack, so that nothing msgpack reads is
// refused or read differently. Bytes that are not a result give a
// *CorruptError, never a panic; bytes after it are ignored. The result
// keeps no reference to b.
func UnmarshalResult(b []byte) (res *Result, err error) {
	d := decoder{in: b, headerAt: -1}
	var r Result
	if d.result(&r) {
		d.mem = make([]byte, 0, d.size)
		d.ownResult(&r)
		return &r, nil
	}
	defer func() {
		if v := recover(); v != nil {
			res, err = nil, &CorruptError{Reason: fmt.Sprintf("undecodable result: %v", v)}
		}
	}()
	return decodeResultMsgpack(b)
}

// ownString moves s into d.mem.
func (d *decoder) ownString(s *string) {
	if len(*s) == 0 {
		return
	}
	start := len(d.mem)
	d.mem = append(d.mem, *s...)
	*s = unsafe.String(&d.mem[start], len(*s))
}

// ownAttempt moves a's strings into d.mem.
func (d *decoder) ownAttempt(a *Attempt) {
	d.ownString(&a.Owner)
	d.ownString(&a.Outcome)
	d.ownString(&a.Reason)
}

// result decodes a result's map into res.
func (d *decoder) result(res *Result) bool {
	n, ok := d.mapLen()
	if !ok {
		return false
	}
	var seen uint8
	for range n {
		var bit uint8
		var u uint64
		var ok bool
		switch string(d.key()) {
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
func (d *decoder) header() bool {
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
func (d *decoder) readHeader() map[string][]string {
	d.pos = d.headerAt
	n, _ := d.mapLen()
	h := make(map[string][]string, n)
	values := make([]string, d.headerValues)
	for range n {
		k, _ := d.str()
		d.ownString(&k)
		m, _ := d.values()
		if m < 0 {
			h[k] = nil
			continue
		}
		vs := values[:m:m]
		values = values[m:]
		for i := range vs {
			vs[i], _ = d.str()
			d.ownString(&vs[i])
		}
		h[k] = vs
	}
	return h
}

// values reads the length of a header's values: -1 for nil.
func (d *decoder) values() (int, bool) {
	if d.pos < len(d.in) && d.in[d.pos] == mpNil {
		d.pos++
		return -1, true
	}
	m, ok := d.arrayLen()
	return m, ok && m <= len(d.in)-d.pos // each value takes a byte at least
}

// attempts decodes the array of attempts: a single one into one, with a
// nil slice.
func (d *decoder) attempts(one *Attempt) (as []Attempt, single, ok bool) {
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
func (d *decoder) attempt(a *Attempt) bool {
	n, ok := d.mapLen()
	if !ok {
		return false
	}
	var seen uint8
	for range n {
		var bit uint8
		var u uint64
		var ok bool
		switch string(d.key()) {
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
