package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/idemkit/idem/backend"
	"github.com/jackc/pgx/v5"
)

var _ backend.LateCompleter = (*Backend)(nil)

// lateQueries fills the statements of CompleteLate. It runs them in one
// transaction that first locks the row (lateGet), so the record it
// decides on is the record it writes: a claim, a completion or a release
// of the key in between waits for the transaction, then sees its outcome
// (an UPDATE under READ COMMITTED re-reads the row's newest version). The
// story is built in Go (backend.LateCompletion.Story: the late attempt may sit
// anywhere in it) and written whole; the row is locked meanwhile.
func lateQueries(q *queries, r *strings.Replacer) {
	q.lateGet = r.Replace(`SELECT {cols} FROM {table} WHERE scope = $1 AND key = $2 FOR UPDATE`)

	// lateInsert records a late result for an absent key: a new life. A
	// row inserted meanwhile (a claim) makes it insert nothing; the
	// transaction then starts over and finds that row.
	q.lateInsert = r.Replace(`
INSERT INTO {table} (` + recordColumns + `, sweeper, sweep_until)
VALUES ($1, $2, $3, 2, $4, $5, {zero}, $6, $7, $8, $9, $9, $10, 1, 0, {zero}, false, $11, '',
	CAST($12 AS jsonb), 0, {zero}, 0, 0, {zero}, false, '', {zero})
ON CONFLICT (scope, key) DO NOTHING`)

	// lateDone makes the locked row done with the late result; its counts,
	// claims, token and mark stay.
	q.lateDone = r.Replace(`
UPDATE {table} SET state = 2, result = $3, fingerprint = $4, done_at = $5, expires_at = $6, recovered = $7,
	checks = 0, next_check = {zero}, attention = false, owner = '', sweeper = '', sweep_until = {zero},
	attempts = CAST($8 AS jsonb)
WHERE scope = $1 AND key = $2`)

	// lateTwice marks the locked row, claimed again by another holder.
	q.lateTwice = r.Replace(`
UPDATE {table} SET twice = true, attempts = CAST($3 AS jsonb) WHERE scope = $1 AND key = $2`)
}

// lateRounds bounds how often CompleteLate starts over because a claim
// inserted the row it found absent.
const lateRounds = 4

// CompleteLate implements backend.LateCompleter, in one transaction with the
// record's row locked.
func (b *Backend) CompleteLate(ctx context.Context, scope, key string, token uint64, l backend.LateCompletion) (backend.LateOutcome, error) {
	if err := validate(scope, key); err != nil {
		return 0, err
	}
	if token == 0 || token > math.MaxInt64 {
		return 0, &backend.FencedError{Scope: scope, Key: key, Token: token} // no sequence gives such a token
	}
	res := backend.EncodeResult(&l.Result)
	var out backend.LateOutcome
	err := b.run(ctx, "complete late", func(ctx context.Context) error {
		for range lateRounds {
			var done bool
			var err error
			out, done, err = b.completeLate(ctx, scope, key, token, l, res)
			if err != nil || done {
				return err
			}
		}
		return fmt.Errorf("record inserted under %d late completions", lateRounds)
	})
	return out, err
}

// completeLate runs one transaction of CompleteLate. done is false when
// the row it found absent was inserted meanwhile: nothing was written.
func (b *Backend) completeLate(ctx context.Context, scope, key string, token uint64, l backend.LateCompletion, res []byte) (out backend.LateOutcome, done bool, err error) {
	tx, err := b.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return 0, false, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	rec, err := scanRecord(tx.QueryRow(ctx, b.q.lateGet, scope, key))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		story, err := encodeAttempts(l.Story(nil, token, false))
		if err != nil {
			return 0, false, err
		}
		tag, err := tx.Exec(ctx, b.q.lateInsert, scope, key, int16(backend.Format), []byte(l.Fingerprint),
			int64(token), encodeTime(l.ExpiresAt), int64(l.Retention), res, encodeTime(l.ClaimedAt),
			encodeTime(l.At), text(l.Recovered), story)
		if err != nil || tag.RowsAffected() == 0 {
			return 0, false, err
		}
		out = backend.LateRecorded
	case err != nil:
		return 0, false, err
	case rec.State == backend.StateDone && rec.Token == token:
		return backend.LateRecorded, true, nil // recorded already
	case rec.State == backend.StateReleased || (rec.State == backend.StateInProgress && rec.Token == token):
		story, err := encodeAttempts(l.Story(rec.Attempts, token, false))
		if err != nil {
			return 0, false, err
		}
		if _, err := tx.Exec(ctx, b.q.lateDone, scope, key, res, []byte(l.Fingerprint), encodeTime(l.At),
			encodeTime(l.ExpiresAt), text(l.Recovered), story); err != nil {
			return 0, false, err
		}
		out = backend.LateRecorded
	default:
		story, err := encodeAttempts(l.Story(rec.Attempts, token, true))
		if err != nil {
			return 0, false, err
		}
		if _, err := tx.Exec(ctx, b.q.lateTwice, scope, key, story); err != nil {
			return 0, false, err
		}
		out = backend.LateRanTwice
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, false, err
	}
	return out, true, nil
}

// storedAttempt is an attempt as the attempts column holds it (see
// attempt in row.go), written from Go: an open attempt has no "e".
type storedAttempt struct {
	Token     int64  `json:"t"`
	ClaimedAt int64  `json:"c"`
	Owner     string `json:"o"`
	EndedAt   *int64 `json:"e,omitempty"`
	Outcome   string `json:"x,omitempty"`
	Reason    string `json:"r,omitempty"`
	Status    int    `json:"s,omitempty"`
}

// encodeAttempts encodes a story for the attempts column, as text.
func encodeAttempts(as []backend.Attempt) (string, error) {
	out := make([]storedAttempt, len(as))
	for i, a := range as {
		out[i] = storedAttempt{Token: int64(a.Token), ClaimedAt: encodeTime(a.ClaimedAt), Owner: text(a.Owner),
			Outcome: text(a.Outcome), Reason: text(a.Reason), Status: a.Status}
		if !a.EndedAt.IsZero() {
			e := encodeTime(a.EndedAt)
			out[i].EndedAt = &e
		}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return "", fmt.Errorf("pgstore: encode attempts: %w", err)
	}
	return string(b), nil
}
