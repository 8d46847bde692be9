package codec

// This file is idem's record encoding as of commit b0ad7f4, before the
// hand-written codec, kept as the reference that the codec's tests compare
// against: Marshal must write the same bytes (up to the order of
// Result.Header's names, which msgpack writes in map order) and Unmarshal
// must return the same record, or an error for the same inputs. Only the
// names and types changed, and the checks of keys, which idem makes. Do
// not "fix" or speed it up: it is the specification by example of record
// format 1. Format 2 seals format 1's map with its checksum (seal, and the
// check in unmarshalReflect).

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/vmihailenco/msgpack/v5"
)

// marshalReflect encodes a record in the current format.
func marshalReflect(r *Record) ([]byte, error) {
	c := *r
	c.Format = Format
	b, err := msgpack.Marshal(&c)
	if err != nil {
		return nil, fmt.Errorf("encode record: %w", err)
	}
	return seal(b), nil
}

// seal appends the CRC-32C of b, big-endian.
func seal(b []byte) []byte {
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
}

// unmarshalReflect decodes a record written by this or an earlier
// release. Corrupt bytes, a record of a newer format, or one that fails
// basic invariants give an error, never a panic.
func unmarshalReflect(b []byte) (rec *Record, err error) {
	// The msgpack decoder panics on some malformed input (a nil where a
	// struct is expected, found by FuzzUnmarshalRecord): corrupt bytes must
	// give an error, never a panic.
	defer func() {
		if p := recover(); p != nil {
			rec, err = nil, fmt.Errorf("undecodable record: %v", p)
		}
	}()
	var r Record
	rd := bytes.NewReader(b)
	if err := msgpack.NewDecoder(rd).Decode(&r); err != nil {
		return nil, err
	}
	// A sealed record is its map and the map's checksum, nothing between.
	// (b[:n:n]: seal appends, and must not write over b's own checksum.)
	n := len(b) - rd.Len()
	switch {
	case r.Format >= 2 && r.Format <= Format && (rd.Len() != 4 || !bytes.Equal(seal(b[:n:n])[n:], b[n:])):
		return nil, fmt.Errorf("checksum mismatch")
	case r.Format == 0 || r.Format > Format:
		return nil, fmt.Errorf("unknown format version %d", r.Format)
	case r.State != stateInProgress && r.State != stateDone && r.State != stateReleased:
		return nil, fmt.Errorf("unknown state %d", r.State)
	case r.State == stateDone && r.Result == nil:
		return nil, fmt.Errorf("done record without a result")
	}
	return &r, nil
}
