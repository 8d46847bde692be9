package idem

// This file is idem's record encoding as of commit b0ad7f4, before the
// hand-written codec of record_codec.go, kept as the reference that the
// codec's tests compare against: MarshalRecord must write the same bytes
// (up to the order of Result.Header's names, which msgpack writes in map
// order) and UnmarshalRecord must return the same record, or an error for
// the same inputs. Only the names changed. Do not "fix" or speed it up: it
// is the specification by example of record format 1.

import (
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// marshalRecordReflect encodes a record in the current format.
func marshalRecordReflect(r *Record) ([]byte, error) {
	c := *r
	c.Format = RecordFormat
	b, err := msgpack.Marshal(&c)
	if err != nil {
		return nil, fmt.Errorf("idem: encode record: %w", err)
	}
	return b, nil
}

// unmarshalRecordReflect decodes a record written by this or an earlier
// release. Corrupt bytes, a record of a newer format, or one that fails
// basic invariants give an error wrapping ErrCorrupt, never a panic.
func unmarshalRecordReflect(b []byte) (rec *Record, err error) {
	// The msgpack decoder panics on some malformed input (a nil where a
	// struct is expected, found by FuzzUnmarshalRecord): corrupt bytes must
	// give an error, never a panic.
	defer func() {
		if p := recover(); p != nil {
			rec, err = nil, fmt.Errorf("%w: undecodable record: %v", ErrCorrupt, p)
		}
	}()
	var r Record
	if err := msgpack.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
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
	return &r, nil
}
