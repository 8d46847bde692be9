package codec

import (
	"errors"
	"time"
)

// Format is the version of the encoding that Append writes. Decode reads
// every version from 1 up to it.
const Format = 1

// The states a stored record can be in; Decode refuses any other.
const (
	stateInProgress = 1
	stateDone       = 2
	stateReleased   = 3
)

// Record mirrors idem.Record field for field: same names, types (State is
// its uint8) and msgpack tags, in the same order. The tags are the format:
// the msgpack fallback decodes by them, and the field names and order are
// those of format 1 as msgpack wrote it.
type Record struct {
	Format        uint8         `msgpack:"v"`
	Scope         string        `msgpack:"sc"`
	Key           string        `msgpack:"k"`
	State         uint8         `msgpack:"st"`
	Fingerprint   string        `msgpack:"fp"`
	Token         uint64        `msgpack:"tk"`
	LeaseEnds     time.Time     `msgpack:"le"`
	ExpiresAt     time.Time     `msgpack:"ex"`
	Retention     time.Duration `msgpack:"rt"`
	Result        *Result       `msgpack:"r,omitempty"`
	FirstSeen     time.Time     `msgpack:"fs"`
	ClaimedAt     time.Time     `msgpack:"ca"`
	DoneAt        time.Time     `msgpack:"da,omitempty"`
	Claims        int           `msgpack:"cl"`
	Checks        int           `msgpack:"ck,omitempty"`
	NextCheck     time.Time     `msgpack:"nc,omitempty"`
	Attention     bool          `msgpack:"at,omitempty"`
	Recovered     string        `msgpack:"rc,omitempty"`
	Owner         string        `msgpack:"ow,omitempty"`
	Attempts      []Attempt     `msgpack:"a,omitempty"`
	Replays       int64         `msgpack:"rp,omitempty"`
	LastReplay    time.Time     `msgpack:"lr,omitempty"`
	Conflicts     int64         `msgpack:"cf,omitempty"`
	Mismatches    int64         `msgpack:"mm,omitempty"`
	LastRejection time.Time     `msgpack:"lj,omitempty"`
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

// Parts is a decoded record in three parts, so that the caller can put the
// record, its result and its only attempt in one allocation of its own
// types. Record.Result is always nil: the result, if any, is Result.
// Record.Attempts is nil when there is exactly one attempt and the fast
// decoder read it: it is One.
type Parts struct {
	Record    Record
	Result    Result
	HasResult bool
	One       Attempt
	HasOne    bool
}

// ErrCorrupt is wrapped by every error of Decode.
var ErrCorrupt = errors.New("corrupt record")

// CorruptError is the error of Decode: the bytes are not a record that it
// reads, for Reason.
type CorruptError struct {
	Reason string
}

func (e *CorruptError) Error() string { return "corrupt record: " + e.Reason }

// Unwrap makes a CorruptError match ErrCorrupt.
func (e *CorruptError) Unwrap() error { return ErrCorrupt }
