package idem

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/idemkit/idem/internal/codec"
)

// Records are stored in the encoding of internal/codec (format 1, see
// docs/record-format.md), whose types mirror Record, Result and Attempt
// field for field. The functions here convert between the two.

// marshalRecord encodes a record in the current format, RecordFormat,
// whatever r.Format says. It does not fail: the error is there for
// encodings that could.
func marshalRecord(r *Record) ([]byte, error) {
	c := toCodec(r)
	return codec.Marshal(&c), nil
}

// unmarshalRecord decodes a record written by this or an earlier release.
// Corrupt bytes, a record of a newer format, or one that fails basic
// invariants give an error wrapping ErrCorrupt, never a panic. Bytes after
// the record are ignored.
//
// It takes one allocation for the record, its result and a single attempt
// (see recordBox), and one for its strings and body: keeping any of those
// in memory keeps all of them.
func unmarshalRecord(b []byte) (*Record, error) {
	var p codec.Parts
	if err := codec.Decode(b, &p); err != nil {
		var ce *codec.CorruptError
		if errors.As(err, &ce) {
			return nil, fmt.Errorf("%w: %s", ErrCorrupt, ce.Reason)
		}
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if ValidateKey(p.Record.Key) != nil || ValidateScope(p.Record.Scope) != nil {
		return nil, fmt.Errorf("%w: malformed scope or key", ErrCorrupt)
	}
	r := fromCodec(&p.Record)
	var res *Result
	if p.HasResult {
		res = (*Result)(&p.Result)
	}
	var one *Attempt
	if p.HasOne {
		one = (*Attempt)(&p.One)
	}
	return boxRecord(&r, res, one), nil
}

// toCodec returns r as the codec's record, sharing its result, attempts
// and strings.
func toCodec(r *Record) codec.Record {
	return codec.Record{
		Format: r.Format, Scope: r.Scope, Key: r.Key, State: uint8(r.State),
		Fingerprint: r.Fingerprint, Token: r.Token, LeaseEnds: r.LeaseEnds, ExpiresAt: r.ExpiresAt,
		Retention: r.Retention, Result: (*codec.Result)(r.Result), FirstSeen: r.FirstSeen,
		ClaimedAt: r.ClaimedAt, DoneAt: r.DoneAt, Claims: r.Claims, Checks: r.Checks,
		NextCheck: r.NextCheck, Attention: r.Attention, Recovered: r.Recovered, Owner: r.Owner,
		Attempts: codecAttempts(r.Attempts), Replays: r.Replays, LastReplay: r.LastReplay,
		Conflicts: r.Conflicts, Mismatches: r.Mismatches, LastRejection: r.LastRejection,
	}
}

// fromCodec returns c as a Record, sharing its result, attempts and
// strings.
func fromCodec(c *codec.Record) Record {
	return Record{
		Format: c.Format, Scope: c.Scope, Key: c.Key, State: State(c.State),
		Fingerprint: c.Fingerprint, Token: c.Token, LeaseEnds: c.LeaseEnds, ExpiresAt: c.ExpiresAt,
		Retention: c.Retention, Result: (*Result)(c.Result), FirstSeen: c.FirstSeen,
		ClaimedAt: c.ClaimedAt, DoneAt: c.DoneAt, Claims: c.Claims, Checks: c.Checks,
		NextCheck: c.NextCheck, Attention: c.Attention, Recovered: c.Recovered, Owner: c.Owner,
		Attempts: attempts(c.Attempts), Replays: c.Replays, LastReplay: c.LastReplay,
		Conflicts: c.Conflicts, Mismatches: c.Mismatches, LastRejection: c.LastRejection,
	}
}

// codecAttempts and attempts give a slice of attempts the other package's
// type, in place, keeping nil, length and capacity. It is sound because
// the pointer conversion inside compiles only while Attempt and
// codec.Attempt have identical fields.
func codecAttempts(as []Attempt) []codec.Attempt {
	return unsafe.Slice((*codec.Attempt)(unsafe.SliceData(as)), cap(as))[:len(as)]
}

func attempts(as []codec.Attempt) []Attempt {
	return unsafe.Slice((*Attempt)(unsafe.SliceData(as)), cap(as))[:len(as)]
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
