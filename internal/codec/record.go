package codec

import (
	"errors"
	"time"
)

// Format is the version of the encoding that Append writes. Unmarshal reads
// every version from 1 up to it. Format 2 is format 1's map followed by
// the CRC-32C of the map (4 bytes, big-endian), checked on every read.
const Format = 2

// The states a stored record can be in; Unmarshal refuses any other.
const (
	stateInProgress = 1
	stateDone       = 2
	stateReleased   = 3
)

// Record mirrors idem.Record field for field: the same names, types (State
// is its uint8), msgpack tags and order, so the same memory layout, which
// lets idem view one as the other without a copy. The tags are the format:
// the msgpack fallback decodes by them.
type Record struct {
	Format          uint8         `msgpack:"v"`
	Scope           string        `msgpack:"sc"`
	Key             string        `msgpack:"k"`
	State           uint8         `msgpack:"st"`
	Fingerprint     string        `msgpack:"fp"`
	Token           uint64        `msgpack:"tk"`
	LeaseEnds       time.Time     `msgpack:"le"`
	ExpiresAt       time.Time     `msgpack:"ex"`
	Retention       time.Duration `msgpack:"rt"`
	Result          *Result       `msgpack:"r,omitempty"`
	FirstSeen       time.Time     `msgpack:"fs"`
	ClaimedAt       time.Time     `msgpack:"ca"`
	DoneAt          time.Time     `msgpack:"da,omitempty"`
	Claims          int           `msgpack:"cl"`
	Checks          int           `msgpack:"ck,omitempty"`
	NextCheck       time.Time     `msgpack:"nc,omitempty"`
	Attention       bool          `msgpack:"at,omitempty"`
	MayHaveRunTwice bool          `msgpack:"tw,omitempty"`
	Recovered       string        `msgpack:"rc,omitempty"`
	Owner           string        `msgpack:"ow,omitempty"`
	Attempts        []Attempt     `msgpack:"a,omitempty"`
	Replays         int64         `msgpack:"rp,omitempty"`
	LastReplay      time.Time     `msgpack:"lr,omitempty"`
	Conflicts       int64         `msgpack:"cf,omitempty"`
	Mismatches      int64         `msgpack:"mm,omitempty"`
	LastRejection   time.Time     `msgpack:"lj,omitempty"`
}

// Result mirrors idem.Result. Its fields have unnamed types, so a
// *idem.Result converts to a *Result and back without a copy.
type Result struct {
	Status    int                 `msgpack:"s,omitempty"`
	Header    map[string][]string `msgpack:"h,omitempty"`
	Body      []byte              `msgpack:"b,omitempty"`
	Error     string              `msgpack:"e,omitempty"`
	Truncated bool                `msgpack:"t,omitempty"`
}

// Attempt mirrors idem.Attempt, and converts to and from it as Result does.
type Attempt struct {
	Token     uint64    `msgpack:"t"`
	ClaimedAt time.Time `msgpack:"c"`
	Owner     string    `msgpack:"o,omitempty"`
	EndedAt   time.Time `msgpack:"e,omitempty"`
	Outcome   string    `msgpack:"x,omitempty"`
	Reason    string    `msgpack:"r,omitempty"`
	Status    int       `msgpack:"s,omitempty"`
}

// ErrCorrupt is wrapped by every error of Unmarshal.
var ErrCorrupt = errors.New("corrupt record")

// CorruptError is the error of Unmarshal: the bytes are not a record that it
// reads, for Reason.
type CorruptError struct {
	Reason string
}

// Error returns "corrupt record: " and the reason.
func (e *CorruptError) Error() string { return "corrupt record: " + e.Reason }

// Unwrap makes a CorruptError match ErrCorrupt.
func (e *CorruptError) Unwrap() error { return ErrCorrupt }

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

// Box returns a copy of r in one allocation, with a copy of res as its
// Result (if not nil, else a nil Result) and a copy of one as its only
// attempt (if not nil, else the attempts of r). The copies are shallow.
func Box(r *Record, res *Result, one *Attempt) *Record {
	if res != nil {
		return new(resultRecordBox).fill(r, res, one)
	}
	b := &recordBox{rec: *r}
	b.rec.Result = nil
	return b.rec.attach(&b.att, one)
}

// fill puts copies of r, res (its Result, if not nil) and one (its only
// attempt, if not nil) in b, and returns b's record.
func (b *resultRecordBox) fill(r *Record, res *Result, one *Attempt) *Record {
	b.rec = *r
	if res != nil {
		b.res = *res
		b.rec.Result = &b.res
	} else {
		b.rec.Result = nil
	}
	return b.rec.attach(&b.att, one)
}

// attach makes a copy of one, in att, r's only attempt, if one is not nil.
func (r *Record) attach(att *[1]Attempt, one *Attempt) *Record {
	if one != nil {
		att[0] = *one
		r.Attempts = att[:]
	}
	return r
}

// Space is room for a record, its result and its only attempt, for
// UnmarshalInto: a caller that decodes a record only to rewrite it keeps
// one and reuses it, so that the decode allocates only the record's
// strings and body.
type Space resultRecordBox
