package backend

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/idemkit/idem/internal/codec"
)

// Records are stored in the encoding of internal/codec (format 2, see
// docs/record-format.md). Its Record, Result and Attempt mirror this
// package's, field for field, in the same memory layout: the functions here
// view one as the other rather than copy. A copy field by field cost 15 to
// 20% of an encode and 5 to 10% of a decode (docs/record-format.md, Cost).

// The layouts must match: this fails to compile if the sizes differ, and
// TestRecordCodec_MirrorsTypes checks every field's name, type and offset.
var _ = [1]struct{}{}[unsafe.Sizeof(Record{})-unsafe.Sizeof(codec.Record{})]
var _ = [1]struct{}{}[unsafe.Sizeof(codec.Record{})-unsafe.Sizeof(Record{})]

// asCodec and asRecord view a record as the other package's type. Result
// and Attempt need no unsafe: their fields have identical types, so Go
// converts pointers to them directly.
func asCodec(r *Record) *codec.Record { return (*codec.Record)(unsafe.Pointer(r)) }

func asRecord(r *codec.Record) *Record { return (*Record)(unsafe.Pointer(r)) }

// EncodeRecord encodes a record in the current format, Format, whatever
// r.Format says. A backend that stores records as bytes uses it, so that
// every backend's records read alike.
func EncodeRecord(r *Record) []byte {
	return codec.Marshal(asCodec(r))
}

// DecodeRecord decodes a record written by EncodeRecord of this or an
// earlier release.
// Corrupt bytes, a record of a newer format, or one that fails basic
// invariants give an error wrapping ErrCorrupt, never a panic. Bytes after
// the record are ignored.
//
// A record takes one allocation for itself, its result and a single
// attempt (see box), and one for its strings and body: keeping any
// of those in memory keeps all of them.
func DecodeRecord(b []byte) (*Record, error) {
	return decodeRecord(b, nil)
}

// EncodeResult encodes res alone, in the form a record's encoding holds
// its result (msgpack's, which msgpack.Unmarshal of a Result also reads):
// for a backend that keeps the result apart from the rest of the record,
// as pgstore keeps it in a column of its own.
func EncodeResult(res *Result) []byte {
	return codec.AppendResult(nil, (*codec.Result)(res))
}

// DecodeResult decodes a result that EncodeResult, or msgpack.Marshal of a
// Result, wrote. Corrupt bytes give an error wrapping ErrCorrupt, never a
// panic; bytes after the result are ignored. The result keeps no
// reference to b.
func DecodeResult(b []byte) (*Result, error) {
	res, err := codec.UnmarshalResult(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return (*Result)(res), nil
}

// RecordSpace is room to decode one record into. A backend that decodes
// a record only to rewrite it within one operation (a completion reading
// the claim it ends) keeps one per operation and reuses it: decoding then
// allocates only the record's strings and body, not the record.
type RecordSpace struct{ sp codec.Space }

// Decode is DecodeRecord into s. The record returned is valid until s is
// decoded into again; a record in an older form may come in memory of its
// own.
func (s *RecordSpace) Decode(b []byte) (*Record, error) {
	return decodeRecord(b, &s.sp)
}

// decodeRecord is DecodeRecord, into sp if not nil.
func decodeRecord(b []byte, sp *codec.Space) (*Record, error) {
	c, err := codec.UnmarshalInto(b, sp)
	if err != nil {
		var ce *codec.CorruptError
		if errors.As(err, &ce) {
			return nil, fmt.Errorf("%w: %s", ErrCorrupt, ce.Reason)
		}
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if ValidateKey(c.Key) != nil || ValidateStoredScope(c.Scope) != nil {
		return nil, fmt.Errorf("%w: malformed scope or key", ErrCorrupt)
	}
	return asRecord(c), nil
}

// box returns a copy of r in one allocation, with a copy of res as
// its Result (if not nil, else a nil Result) and a copy of one as its only
// attempt (if not nil, else the attempts of r). The copies are shallow.
// A record's Result and Attempts point into its box only when they were
// filled from it: appending to an Attempts of capacity one moves it out,
// and setting Result leaves the box's copy unused.
func box(r *Record, res *Result, one *Attempt) *Record {
	return asRecord(codec.Box(asCodec(r), (*codec.Result)(res), (*codec.Attempt)(one)))
}
