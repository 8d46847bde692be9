package backend

import (
	"fmt"
	"time"
)

// State is where a record stands in its life: absent, in progress, done.
type State uint8

// The states a stored record can be in. An absent record is not stored.
const (
	// StateInProgress means a claim holds the key: its effect may be running,
	// or, once the lease ended, its outcome awaits recovery.
	StateInProgress State = 1
	// StateDone means the result is saved and is replayed to every repeat
	// until the record expires.
	StateDone State = 2
)

// StateReleased marks a stored record whose last claim was released. For
// the contract it is absent (the next request claims it); it is kept only
// to tell the key's story, and expires like a done record.
const StateReleased State = 3

// String returns "in_progress", "done" or "released".
func (s State) String() string {
	switch s {
	case StateInProgress:
		return "in_progress"
	case StateDone:
		return "done"
	case StateReleased:
		return "released"
	default:
		return fmt.Sprintf("state(%d)", uint8(s))
	}
}

// Result is what an effect produced and what a repeat gets back. The core
// stores it opaquely; idemhttp fills Status, Header and Body with the saved
// HTTP response.
type Result struct {
	// Status is an application status, such as the HTTP status code.
	Status int `msgpack:"s,omitempty"`
	// Header holds saved metadata, such as allow-listed HTTP headers.
	Header map[string][]string `msgpack:"h,omitempty"`
	// Body is the saved payload.
	Body []byte `msgpack:"b,omitempty"`
	// Error is the text of the effect's error when the error policy saved a
	// failed attempt; a replay returns it as a *SavedError.
	Error string `msgpack:"e,omitempty"`
	// Truncated is true when the effect ran but its body was too large to
	// keep: a repeat learns that it ran without getting the body.
	Truncated bool `msgpack:"t,omitempty"`
}

// Format is the version of the record encoding this release writes
// (EncodeRecord; docs/record-format.md). DecodeRecord accepts every
// version up to it and refuses newer ones with ErrCorrupt, so a downgrade
// never misreads a record. Record.Format says which version a record was
// read from.
const Format = 2

// Record is the stored state of one (scope, key). Backends persist it whole
// and return copies: changing a returned Record changes nothing stored.
type Record struct {
	// Format is the encoding version the record was written with.
	Format uint8  `msgpack:"v"`
	Scope  string `msgpack:"sc"`
	Key    string `msgpack:"k"`
	State  State  `msgpack:"st"`
	// Fingerprint is the digest of the payload that claimed the key.
	Fingerprint string `msgpack:"fp"`
	// Token is the fencing token of the current or last claim. It changes
	// on every new claim and never repeats within a store.
	Token uint64 `msgpack:"tk"`
	// LeaseEnds is when an in-progress claim is deemed stale unless extended.
	// Zero for an orphaned claim (its process is gone).
	LeaseEnds time.Time `msgpack:"le"`
	// ExpiresAt is when a done record stops replaying and may be reclaimed.
	ExpiresAt time.Time `msgpack:"ex"`
	// Retention is the retention to apply when the claim completes.
	Retention time.Duration `msgpack:"rt"`
	// Result is the saved outcome of a done record.
	Result *Result `msgpack:"r,omitempty"`
	// FirstSeen is when the key was first claimed in this record's life.
	FirstSeen time.Time `msgpack:"fs"`
	// ClaimedAt is when the current claim was taken.
	ClaimedAt time.Time `msgpack:"ca"`
	// DoneAt is when the record became done.
	DoneAt time.Time `msgpack:"da,omitempty"`
	// Claims counts the claims (executions started) in this record's life.
	Claims int `msgpack:"cl"`
	// Checks counts the resolver's inconclusive answers for the current claim.
	Checks int `msgpack:"ck,omitempty"`
	// NextCheck is when recovery may ask the resolver again.
	NextCheck time.Time `msgpack:"nc,omitempty"`
	// Attention is true once recovery gave up on the claim.
	Attention bool `msgpack:"at,omitempty"`
	// MayHaveRunTwice is true once a holder whose claim had been recovered
	// finished its effect after another holder claimed the key again: the
	// effect may have run twice. The newer holder's outcome stands; the
	// mark stays for the rest of the record's life (its completion or
	// release keeps it), and the story (Attempts) tells which attempts.
	MayHaveRunTwice bool `msgpack:"tw,omitempty"`
	// Recovered says how recovery ended a done record's claim
	// ("committed"), or why a released record's claim was released.
	Recovered string `msgpack:"rc,omitempty"`
	// Owner identifies the process instance that holds the claim.
	Owner string `msgpack:"ow,omitempty"`

	// Attempts tells the story of the claims of this record's life, oldest
	// first: the first claim and the latest ones, at most KeptAttempts.
	Attempts []Attempt `msgpack:"a,omitempty"`
	// Replays counts the repeats answered with the saved result;
	// LastReplay is the latest (up to 100 ms early with the system clock,
	// see Options.Clock). Counted in memory and written in batches, at most
	// once per record per count interval (the Store's
	// Options.CountInterval), so a count read may lag by one interval; a
	// count is never more than the replays answered, and exact unless
	// the Store's CountsApproximate says otherwise (docs/contract.md, "Counts").
	Replays    int64     `msgpack:"rp,omitempty"`
	LastReplay time.Time `msgpack:"lr,omitempty"`
	// Conflicts counts repeats refused because a claim was in progress
	// (409); Mismatches those refused for another fingerprint (422).
	// LastRejection is the latest of either.
	Conflicts     int64     `msgpack:"cf,omitempty"`
	Mismatches    int64     `msgpack:"mm,omitempty"`
	LastRejection time.Time `msgpack:"lj,omitempty"`
}

// KeptAttempts bounds Record.Attempts, the story of a record's claims: the
// first attempt and the latest ones are kept.
const KeptAttempts = 16

// Attempt is one claim in a record's story.
type Attempt struct {
	Token     uint64    `msgpack:"t"`
	ClaimedAt time.Time `msgpack:"c"`
	Owner     string    `msgpack:"o,omitempty"`
	// EndedAt and Outcome are zero while the claim is open. Outcome is
	// "completed", "recovered: committed" (recovery saved the downstream
	// result) or "released" (Reason says why, such as "recovered: not
	// committed").
	EndedAt time.Time `msgpack:"e,omitempty"`
	Outcome string    `msgpack:"x,omitempty"`
	// Reason says why a claim was released, or notes what happened to it
	// while open (such as "orphaned by a restart").
	Reason string `msgpack:"r,omitempty"`
	// Status is the saved result's status, for a completed claim.
	Status int `msgpack:"s,omitempty"`
}

// AddAttempt appends a new claim to the story, keeping the first and the
// latest ones (at most KeptAttempts). A backend calls it when it stores a
// claim.
func (r *Record) AddAttempt(a Attempt) {
	r.Attempts = append(r.Attempts, a)
	if n := len(r.Attempts); n > KeptAttempts {
		r.Attempts = append(r.Attempts[:1], r.Attempts[n-KeptAttempts+1:]...)
	}
}

// EndAttempt stores e in the attempt of the claim with token, as Ending
// says. A backend calls it when it completes or releases a claim.
func (r *Record) EndAttempt(token uint64, e Ending) {
	for i := len(r.Attempts) - 1; i >= 0; i-- {
		if a := &r.Attempts[i]; a.Token == token {
			a.EndedAt, a.Outcome, a.Status = e.At, e.Outcome, e.Status
			if e.Reason != "" {
				a.Reason = e.Reason
			}
			return
		}
	}
}

// NoteAttempt sets the note (Attempt.Reason) of the open claim with token.
func (r *Record) NoteAttempt(token uint64, note string) {
	for i := len(r.Attempts) - 1; i >= 0; i-- {
		if a := &r.Attempts[i]; a.Token == token {
			a.Reason = note
			return
		}
	}
}

// Tally is a batch of counts for one record, added by Store in the
// background so that counting never puts a replay on the disk's path.
type Tally struct {
	Scope, Key                     string
	Replays, Conflicts, Mismatches int64
	LastReplay, LastRejection      time.Time
	// ExpiresAt and Token are the counted record's expiry and fencing
	// token if the counts were taken on a done record, zero otherwise (a
	// claim in progress): with them a backend may store the counts beside
	// the record, for its life and expiring with it, without reading the
	// record first.
	ExpiresAt time.Time
	Token     uint64
}

// AddTally adds t's counts to r, keeping the latest times.
func (r *Record) AddTally(t Tally) {
	r.Replays += t.Replays
	r.Conflicts += t.Conflicts
	r.Mismatches += t.Mismatches
	if t.LastReplay.After(r.LastReplay) {
		r.LastReplay = t.LastReplay
	}
	if t.LastRejection.After(r.LastRejection) {
		r.LastRejection = t.LastRejection
	}
}

// Add adds u's counts to t, keeping the latest times.
func (t *Tally) Add(u Tally) {
	t.Replays += u.Replays
	t.Conflicts += u.Conflicts
	t.Mismatches += u.Mismatches
	if u.LastReplay.After(t.LastReplay) {
		t.LastReplay = u.LastReplay
	}
	if u.LastRejection.After(t.LastRejection) {
		t.LastRejection = u.LastRejection
	}
	if u.ExpiresAt.After(t.ExpiresAt) {
		t.ExpiresAt = u.ExpiresAt
	}
	t.Token = max(t.Token, u.Token)
}

// Stale reports whether an in-progress record's lease has ended at now.
func (r *Record) Stale(now time.Time) bool {
	return r.State == StateInProgress && !now.Before(r.LeaseEnds)
}

// Expired reports whether a done record's retention has ended at now.
func (r *Record) Expired(now time.Time) bool {
	return r.State == StateDone && !now.Before(r.ExpiresAt)
}

// Clone returns a deep copy: the copy shares no memory that can be
// changed with r (only strings, which cannot be). An empty body or list of
// attempts comes out nil. It takes one allocation for the record, its
// result and a single attempt (see recordBox), and one for the body.
func (r *Record) Clone() *Record {
	var one *Attempt
	if len(r.Attempts) == 1 {
		one = &r.Attempts[0]
	}
	c := box(r, r.Result, one)
	if res := c.Result; res != nil {
		res.Header = cloneHeader(r.Result.Header)
		res.Body = append([]byte(nil), r.Result.Body...)
	}
	if one == nil {
		c.Attempts = append([]Attempt(nil), r.Attempts...)
	}
	return c
}

// Clone returns a deep copy of r.
func (r *Result) Clone() *Result {
	res := *r
	res.Header = cloneHeader(r.Header)
	res.Body = append([]byte(nil), r.Body...)
	return &res
}

// cloneHeader copies h with one backing array for every value (a nil
// value stays nil).
func cloneHeader(h map[string][]string) map[string][]string {
	if h == nil {
		return nil
	}
	n := 0
	for _, v := range h {
		n += len(v)
	}
	values := make([]string, 0, n)
	c := make(map[string][]string, len(h))
	for k, v := range h {
		if v == nil {
			c[k] = nil
			continue
		}
		start := len(values)
		values = append(values, v...)
		c[k] = values[start:len(values):len(values)]
	}
	return c
}
