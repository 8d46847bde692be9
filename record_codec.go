package idem

import (
	"fmt"
)

// The stored encoding of a Record, format 1, is the msgpack map that
// github.com/vmihailenco/msgpack/v5 writes for a *Record from the struct
// tags in record.go, with its default options. This file writes and reads
// those bytes by hand, without reflection: what MarshalRecord writes is
// byte for byte what msgpack.Marshal writes (the tests compare the two on
// generated records), so that stores written before and after read each
// other. In that encoding:
//
//   - fields come in struct order, keyed by their tag names, all fixstr;
//     an omitempty field is left out when it is zero: a zero time, a zero
//     number, false, an empty string, slice or map, a nil pointer;
//   - uint8 fields (Format, State) are always uint8 (0xcc), uint64 (Token)
//     always uint64 (0xcf), int64 and time.Duration always int64 (0xd3);
//     int fields take the smallest integer form for their value;
//   - a time is extension -1 in its 4-, 8- or 12-byte form (the zero time,
//     in year 1, takes 12 bytes where it is not left out);
//   - a []byte is bin8, bin16 or bin32; a nil []string among a header's
//     values is a nil (0xc0), an empty one an empty array;
//   - Result.Header's names are written here in sorted order, where
//     msgpack writes them in map order: the encoding of a record with
//     several header names is deterministic, and is msgpack's up to that
//     order.
//
// The fast decoder (decodeRecord) reads what MarshalRecord or msgpack
// writes. A record in any other form that msgpack reads (another integer
// width, a nil for a value, an unknown field, a field twice, a struct as an
// array), or a corrupt one, is left to msgpack (record_msgpack.go), so that
// nothing that msgpack reads is refused and nothing is read differently.

// MarshalRecord encodes a record in the current format, RecordFormat,
// whatever r.Format says. It does not fail: the error is there for
// encodings that could.
func MarshalRecord(r *Record) ([]byte, error) {
	return appendRecord(make([]byte, 0, recordSize(r)), r), nil
}

// UnmarshalRecord decodes a record written by this or an earlier release.
// Corrupt bytes, a record of a newer format, or one that fails basic
// invariants give an error wrapping ErrCorrupt, never a panic. Bytes after
// the record are ignored, as msgpack ignores them.
//
// The strings and the result body of a record decoded by the fast path
// share one allocation: keeping any of them in memory keeps all of them.
func UnmarshalRecord(b []byte) (rec *Record, err error) {
	// The msgpack decoder panics on some malformed input (a nil where a
	// struct is expected, found by FuzzUnmarshalRecord): corrupt bytes must
	// give an error, never a panic.
	defer func() {
		if p := recover(); p != nil {
			rec, err = nil, fmt.Errorf("%w: undecodable record: %v", ErrCorrupt, p)
		}
	}()
	r, ok := decodeRecord(b)
	if !ok {
		if r, err = decodeRecordMsgpack(b); err != nil {
			return nil, err
		}
	}
	switch {
	case r.Format == 0 || r.Format > RecordFormat:
		return nil, fmt.Errorf("%w: unknown format version %d", ErrCorrupt, r.Format)
	case r.State != StateInProgress && r.State != StateDone && r.State != StateReleased:
		return nil, fmt.Errorf("%w: unknown state %d", ErrCorrupt, r.State)
	case r.State == StateDone && r.Result == nil:
		return nil, fmt.Errorf("%w: done record without a result", ErrCorrupt)
	case ValidateKey(r.Key) != nil || ValidateScope(r.Scope) != nil:
		return nil, fmt.Errorf("%w: malformed scope or key", ErrCorrupt)
	}
	return r, nil
}

// recordBox holds a record and its only attempt, and resultRecordBox a
// record, its result and its only attempt, so that a decoded or cloned
// record (a claim's, or a done one with its first attempt) takes one
// allocation rather than two or three. A record's Result and Attempts
// point into its box only when they were filled from it: appending to an
// Attempts of capacity one moves it out, and setting Result leaves the
// box's copy unused.
type (
	recordBox struct {
		rec Record
		att [1]Attempt
	}
	resultRecordBox struct {
		rec Record
		res Result
		att [1]Attempt
	}
)

// boxRecord returns a copy of r in a box, with a copy of res as its Result
// (if not nil, else a nil Result) and a copy of one as its only attempt
// (if not nil, else the attempts of r). The copies are shallow.
func boxRecord(r *Record, res *Result, one *Attempt) *Record {
	var c *Record
	var att *[1]Attempt
	if res != nil {
		b := &resultRecordBox{rec: *r, res: *res}
		c, att = &b.rec, &b.att
		c.Result = &b.res
	} else {
		b := &recordBox{rec: *r}
		c, att = &b.rec, &b.att
		c.Result = nil
	}
	if one != nil {
		att[0] = *one
		c.Attempts = att[:]
	}
	return c
}

// The msgpack type codes the codec writes and reads.
const (
	mpFixMap   = 0x80
	mpFixArray = 0x90
	mpFixStr   = 0xa0
	mpNil      = 0xc0
	mpFalse    = 0xc2
	mpTrue     = 0xc3
	mpBin8     = 0xc4
	mpBin16    = 0xc5
	mpBin32    = 0xc6
	mpExt8     = 0xc7
	mpExt16    = 0xc8
	mpExt32    = 0xc9
	mpFloat32  = 0xca
	mpFloat64  = 0xcb
	mpUint8    = 0xcc
	mpUint16   = 0xcd
	mpUint32   = 0xce
	mpUint64   = 0xcf
	mpInt8     = 0xd0
	mpInt16    = 0xd1
	mpInt32    = 0xd2
	mpInt64    = 0xd3
	mpFixExt1  = 0xd4
	mpFixExt4  = 0xd6
	mpFixExt8  = 0xd7
	mpFixExt16 = 0xd8
	mpStr8     = 0xd9
	mpStr16    = 0xda
	mpStr32    = 0xdb
	mpArray16  = 0xdc
	mpArray32  = 0xdd
	mpMap16    = 0xde
	mpMap32    = 0xdf

	// mpTimeExt is msgpack's extension type for a time.Time.
	mpTimeExt = 0xff // -1
)
