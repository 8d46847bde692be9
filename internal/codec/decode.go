package codec

import (
	"fmt"
	"time"
	"unsafe"
)

// Decode decodes a record written in this or an earlier format into p,
// which it overwrites (with the zero Parts on an error). Bytes that are not a record, a record of a newer
// format, of an unknown state, or done without a result give a
// *CorruptError, never a panic. Bytes after the record are ignored, as
// msgpack ignores them.
//
// The fast path (decodeFast) reads the forms that Append writes; any other
// form that msgpack reads goes to msgpack (fallback.go), so that nothing
// msgpack reads is refused or read differently. The strings and the body
// of a record decoded by the fast path share one allocation: keeping any
// of them keeps all of them.
func Decode(b []byte, p *Parts) (err error) {
	// msgpack panics on some malformed input (a nil where a struct is
	// expected, found by FuzzUnmarshalRecord).
	defer func() {
		if v := recover(); v != nil {
			*p = Parts{}
			err = &CorruptError{Reason: fmt.Sprintf("undecodable record: %v", v)}
		}
	}()
	*p = Parts{}
	if !decodeFast(b, p) {
		*p = Parts{}
		if err := decodeMsgpack(b, p); err != nil {
			return err
		}
	}
	if err := p.check(); err != nil {
		*p = Parts{}
		return err
	}
	return nil
}

// check refuses a record that its format does not allow.
func (p *Parts) check() error {
	r := &p.Record
	switch {
	case r.Format == 0 || r.Format > Format:
		return &CorruptError{Reason: fmt.Sprintf("unknown format version %d", r.Format)}
	case r.State != stateInProgress && r.State != stateDone && r.State != stateReleased:
		return &CorruptError{Reason: fmt.Sprintf("unknown state %d", r.State)}
	case r.State == stateDone && !p.HasResult:
		return &CorruptError{Reason: "done record without a result"}
	}
	return nil
}

// decoder is the fast path. It reads the record in one pass, its strings
// and body still in the input, then copies those into one allocation of
// their exact size (own).
//
// Every method reports false, having read an unknown amount, on input it
// does not handle, whether corrupt or merely in another form msgpack
// accepts: Decode then leaves the input to msgpack. No method panics.
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

// decodeFast decodes in into p (zero on entry), reporting false if in is
// not in the forms Append writes, or not a record at all. A field it does
// not know, or a field twice, is left to msgpack too.
func decodeFast(in []byte, p *Parts) bool {
	d := decoder{in: in, headerAt: -1}
	if !d.record(p) {
		return false
	}
	d.ownParts(p)
	return true
}

// record reads the record's map into p, its strings still in d.in.
func (d *decoder) record(p *Parts) bool {
	n, ok := d.mapLen()
	if !ok {
		return false
	}
	var seen uint32
	for range n {
		bit, ok := d.recordField(d.key(), p)
		if !ok || seen&bit != 0 {
			return false
		}
		seen |= bit
	}
	return true
}

// recordField reads the value of the field named k (nil if the key was
// not read) into p, and returns the field's bit in the set of fields seen.
func (d *decoder) recordField(k []byte, p *Parts) (bit uint32, ok bool) {
	r := &p.Record
	var u uint64
	switch string(k) {
	case "v":
		u, ok = d.int()
		r.Format = uint8(u)
		return 1 << 0, ok
	case "sc":
		r.Scope, ok = d.str()
		return 1 << 1, ok
	case "k":
		r.Key, ok = d.str()
		return 1 << 2, ok
	case "st":
		u, ok = d.int()
		r.State = uint8(u)
		return 1 << 3, ok
	case "fp":
		r.Fingerprint, ok = d.str()
		return 1 << 4, ok
	case "tk":
		r.Token, ok = d.int()
		return 1 << 5, ok
	case "le":
		r.LeaseEnds, ok = d.time()
		return 1 << 6, ok
	case "ex":
		r.ExpiresAt, ok = d.time()
		return 1 << 7, ok
	case "rt":
		u, ok = d.int()
		r.Retention = time.Duration(u)
		return 1 << 8, ok
	case "r":
		p.HasResult = true
		return 1 << 9, d.result(&p.Result)
	case "fs":
		r.FirstSeen, ok = d.time()
		return 1 << 10, ok
	case "ca":
		r.ClaimedAt, ok = d.time()
		return 1 << 11, ok
	case "da":
		r.DoneAt, ok = d.time()
		return 1 << 12, ok
	case "cl":
		u, ok = d.int()
		r.Claims = int(int64(u))
		return 1 << 13, ok
	case "ck":
		u, ok = d.int()
		r.Checks = int(int64(u))
		return 1 << 14, ok
	case "nc":
		r.NextCheck, ok = d.time()
		return 1 << 15, ok
	case "at":
		r.Attention, ok = d.bool()
		return 1 << 16, ok
	case "rc":
		r.Recovered, ok = d.str()
		return 1 << 17, ok
	case "ow":
		r.Owner, ok = d.str()
		return 1 << 18, ok
	case "a":
		r.Attempts, p.HasOne, ok = d.attempts(&p.One)
		return 1 << 19, ok
	case "rp":
		u, ok = d.int()
		r.Replays = int64(u)
		return 1 << 20, ok
	case "lr":
		r.LastReplay, ok = d.time()
		return 1 << 21, ok
	case "cf":
		u, ok = d.int()
		r.Conflicts = int64(u)
		return 1 << 22, ok
	case "mm":
		u, ok = d.int()
		r.Mismatches = int64(u)
		return 1 << 23, ok
	case "lj":
		r.LastRejection, ok = d.time()
		return 1 << 24, ok
	}
	return 0, false
}

// ownParts moves the strings and the body of p out of d.in, into d.mem,
// and builds the result's header there.
func (d *decoder) ownParts(p *Parts) {
	r, res := &p.Record, &p.Result
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
	d.ownAttempt(&p.One)
	for i := range r.Attempts {
		d.ownAttempt(&r.Attempts[i])
	}
}

// own moves s into d.mem.
func (d *decoder) own(s *string) {
	if len(*s) == 0 {
		return
	}
	start := len(d.mem)
	d.mem = append(d.mem, *s...)
	*s = unsafe.String(&d.mem[start], len(*s))
}

// ownAttempt moves a's strings into d.mem.
func (d *decoder) ownAttempt(a *Attempt) {
	d.own(&a.Owner)
	d.own(&a.Outcome)
	d.own(&a.Reason)
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
