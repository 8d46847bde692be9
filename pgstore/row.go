package pgstore

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idemkit/idem/backend"
	"github.com/jackc/pgx/v5"
)

// Record states as stored in the state column.
const (
	stateInProgress = int16(backend.StateInProgress)
	stateDone       = int16(backend.StateDone)
	stateReleased   = int16(backend.StateReleased)
)

// recordColumns are the columns that hold an backend.Record, in the order
// row.dest lists them.
const recordColumns = "scope, key, format, state, fingerprint, token, lease_ends, expires_at, " +
	"retention, result, first_seen, claimed_at, done_at, claims, checks, next_check, attention, recovered, owner, " +
	"attempts, replays, last_replay, conflicts, mismatches, last_rejection, twice"

// columns lists recordColumns, each prefixed with alias and a dot if alias
// is not empty.
func columns(alias string) string {
	if alias == "" {
		return recordColumns
	}
	return alias + "." + strings.ReplaceAll(recordColumns, ", ", ", "+alias+".")
}

// countedColumns lists recordColumns of the records row aliased r, with
// the counts of the counts row aliased c added to the row's own: c comes
// from a LEFT JOIN (countsJoin), and is NULL where no counts were added.
func countedColumns(r, c string) string {
	cols := strings.Split(recordColumns, ", ")
	for i, col := range cols {
		switch col {
		case "replays", "conflicts", "mismatches":
			cols[i] = r + "." + col + " + coalesce(" + c + "." + col + ", 0)"
		case "last_replay", "last_rejection":
			cols[i] = "greatest(" + r + "." + col + ", " + c + "." + col + ")" // NULLs ignored
		default:
			cols[i] = r + "." + col
		}
	}
	return strings.Join(cols, ", ")
}

// countsJoin joins the counts of the records row aliased r, as c: those
// of the row's life only (see tally.go). It is a lookup of the counts'
// primary key per records row, whatever the number of rows: OFFSET 0
// keeps the planner from turning it into a merge join, which for a page of
// Scan would read the counts table from its start.
func countsJoin(r string) string {
	return `LEFT JOIN LATERAL (
	SELECT * FROM {counts} AS c WHERE c.scope = ` + r + `.scope AND c.key = ` + r + `.key AND c.life = ` + r + `.first_seen OFFSET 0
) AS c ON true`
}

// row is a records row as scanned.
type row struct {
	scope, key                      string
	format, state                   int16
	fingerprint                     []byte
	token                           int64
	leaseEnds, expiresAt, retention int64
	result                          []byte
	firstSeen, claimedAt, doneAt    int64
	claims, checks                  int32
	nextCheck                       int64
	attention                       bool
	recovered, owner                string
	attempts                        []byte // jsonb text
	replays, lastReplay             int64
	conflicts, mismatches           int64
	lastRejection                   int64
	twice                           bool
}

// dest returns the scan destinations, in recordColumns order, after extra.
func (r *row) dest(extra ...any) []any {
	return append(extra,
		&r.scope, &r.key, &r.format, &r.state, &r.fingerprint, &r.token, &r.leaseEnds, &r.expiresAt,
		&r.retention, &r.result, &r.firstSeen, &r.claimedAt, &r.doneAt, &r.claims, &r.checks,
		&r.nextCheck, &r.attention, &r.recovered, &r.owner,
		&r.attempts, &r.replays, &r.lastReplay, &r.conflicts, &r.mismatches, &r.lastRejection, &r.twice)
}

// scanRecord reads one row of recordColumns and decodes it.
func scanRecord(s pgx.Row) (*backend.Record, error) {
	var r row
	if err := s.Scan(r.dest()...); err != nil {
		return nil, err
	}
	return r.record()
}

// record decodes the row, checking what a Record must satisfy. A row that
// fails gives an error wrapping backend.ErrCorrupt: a newer format, an unknown
// state, a done record without a result, a result that does not decode.
func (r *row) record() (*backend.Record, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	rec := &backend.Record{
		Format:          uint8(r.format),
		Scope:           r.scope,
		Key:             r.key,
		State:           backend.State(r.state),
		Fingerprint:     string(r.fingerprint),
		Token:           uint64(r.token),
		LeaseEnds:       decodeTime(r.leaseEnds),
		ExpiresAt:       decodeTime(r.expiresAt),
		Retention:       time.Duration(r.retention),
		FirstSeen:       decodeTime(r.firstSeen),
		ClaimedAt:       decodeTime(r.claimedAt),
		DoneAt:          decodeTime(r.doneAt),
		Claims:          int(r.claims),
		Checks:          int(r.checks),
		NextCheck:       decodeTime(r.nextCheck),
		Attention:       r.attention,
		MayHaveRunTwice: r.twice,
		Recovered:       r.recovered,
		Owner:           r.owner,

		Replays:       r.replays,
		LastReplay:    decodeTime(r.lastReplay),
		Conflicts:     r.conflicts,
		Mismatches:    r.mismatches,
		LastRejection: decodeTime(r.lastRejection),
	}
	attempts, err := decodeAttempts(r.attempts)
	if err != nil {
		return nil, r.corrupt("attempts: %v", err)
	}
	rec.Attempts = attempts
	if r.state == stateDone {
		if rec.Result, err = r.decodeResult(); err != nil {
			return nil, err
		}
	}
	return rec, nil
}

// corrupt returns an error wrapping backend.ErrCorrupt about r's record.
func (r *row) corrupt(format string, a ...any) error {
	return fmt.Errorf("%w: pgstore: record %q in scope %q: %s", backend.ErrCorrupt, r.key, r.scope, fmt.Sprintf(format, a...))
}

// check checks what a Record must satisfy of the columns scanned into r
// (the counts are zero when scanBrief read it).
func (r *row) check() error {
	switch {
	case r.format < 1 || r.format > backend.Format:
		return r.corrupt("unknown format version %d", r.format)
	case r.state != stateInProgress && r.state != stateDone && r.state != stateReleased:
		return r.corrupt("unknown state %d", r.state)
	case r.state == stateDone && r.result == nil:
		return r.corrupt("done record without a result")
	case r.token <= 0 || r.claims < 0 || r.checks < 0:
		return r.corrupt("token %d, claims %d, checks %d", r.token, r.claims, r.checks)
	case backend.ValidateKey(r.key) != nil || backend.ValidateStoredScope(r.scope) != nil:
		return r.corrupt("malformed scope or key")
	}
	return nil
}

// decodeResult decodes the result column of a done record.
func (r *row) decodeResult() (*backend.Result, error) {
	res, err := backend.DecodeResult(r.result)
	if err != nil {
		return nil, fmt.Errorf("%w (pgstore: the result of record %q in scope %q)", err, r.key, r.scope)
	}
	return res, nil
}

// briefColumns are what a replay reads (backend.ClaimArgs.Brief), in the order
// scanBrief lists them.
const briefColumns = "format, state, fingerprint, token, expires_at, result"

// scanBrief reads one row of briefColumns for (scope, key) and decodes it
// into a record with only those fields, checked as record checks them.
func scanBrief(s pgx.Row, scope, key string) (*backend.Record, error) {
	r := row{scope: scope, key: key}
	if err := s.Scan(&r.format, &r.state, &r.fingerprint, &r.token, &r.expiresAt, &r.result); err != nil {
		return nil, err
	}
	if err := r.check(); err != nil {
		return nil, err
	}
	rec := &backend.Record{Format: uint8(r.format), Scope: scope, Key: key, State: backend.State(r.state),
		Fingerprint: string(r.fingerprint), Token: uint64(r.token), ExpiresAt: decodeTime(r.expiresAt)}
	if r.state == stateDone {
		res, err := r.decodeResult()
		if err != nil {
			return nil, err
		}
		rec.Result = res
	}
	return rec, nil
}

// attempt is an backend.Attempt as stored in the attempts column: one object
// of its jsonb array, written by the statements in backend.go. Times are
// encodeTime's nanoseconds; jsonb keeps numbers exactly. A missing "e" is an
// open claim.
type attempt struct {
	Token     int64  `json:"t"`
	ClaimedAt int64  `json:"c"`
	Owner     string `json:"o"`
	EndedAt   *int64 `json:"e"`
	Outcome   string `json:"x"`
	Reason    string `json:"r"`
	Status    int    `json:"s"`
}

// decodeAttempts decodes the attempts column; an empty story is nil.
func decodeAttempts(b []byte) ([]backend.Attempt, error) {
	var as []attempt
	if err := json.Unmarshal(b, &as); err != nil {
		return nil, err
	}
	if len(as) == 0 {
		return nil, nil
	}
	out := make([]backend.Attempt, len(as))
	for i, a := range as {
		if a.Token <= 0 {
			return nil, fmt.Errorf("attempt %d has token %d", i, a.Token)
		}
		out[i] = backend.Attempt{Token: uint64(a.Token), ClaimedAt: decodeTime(a.ClaimedAt), Owner: a.Owner,
			Outcome: a.Outcome, Reason: a.Reason, Status: a.Status}
		if a.EndedAt != nil {
			out[i].EndedAt = decodeTime(*a.EndedAt)
		}
	}
	return out, nil
}

// encodeTime gives the stored form of t: Unix nanoseconds, the smallest
// int64 for the zero time, clamped to the range an int64 holds (Go's
// UnixNano is undefined outside it).
func encodeTime(t time.Time) int64 {
	switch {
	case t.IsZero():
		return math.MinInt64
	case t.Before(time.Unix(0, math.MinInt64+1)):
		return math.MinInt64 + 1
	case t.After(time.Unix(0, math.MaxInt64)):
		return math.MaxInt64
	}
	return t.UnixNano()
}

// decodeTime reverses encodeTime, in UTC.
func decodeTime(n int64) time.Time {
	if n == math.MinInt64 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// text makes s storable in a text column: valid UTF-8 without NUL bytes.
// It is applied only to informational strings (reasons, owners).
func text(s string) string {
	if utf8.ValidString(s) && !strings.Contains(s, "\x00") {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "")
}
