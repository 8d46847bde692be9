package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/backend"
	"github.com/jackc/pgx/v5"
)

// queries are the statements of one store, its names filled in.
type queries struct {
	insert, takeOver                         string // Claim
	insertTx, takeOverTx                     string // Claim for DoTx: the new attempt marked (txNote)
	complete, release, extend, hold, deferTo string // fenced
	reseal                                   string // fenced on a done record
	completeTx                               string // fenced: DoTx's completion, in the effect's transaction
	lateGet, lateInsert, lateDone            string // CompleteLate
	lateTwice                                string // CompleteLate
	get, stale, reclaim, scan                string // whole records, their counts added
	peek                                     string // Claim's read-first path: the row alone
	getBrief                                 string // Claim's read-first path for Store.Begin (backend.ClaimArgs.Brief)
	tally                                    string // tally.go
}

// The story of a record (backend.Record.Attempts) is kept in the attempts
// column as a jsonb array, and every change to it is made by SQL inside the
// statement that makes the change it tells: the claim's INSERT or UPDATE
// appends the new attempt, and the fenced UPDATE of Complete or Release
// ends it. So a claim stays one round trip, a fenced write one statement,
// and the story can never disagree with the row: it is written atomically
// with it, under the row's lock, from the row's newest version. Keeping it
// in msgpack like the result would need a read, a lock and a second
// statement for every claim and end; a separate attempts table would need
// a join in every read, its own deletes on reclaim and on a new life, and
// locks on two tables. jsonb keeps numbers exactly, so times are the same
// int64 nanoseconds as the other columns (see attempt in row.go).
//
// Fencing means the attempt a fenced write ends is the last one: the claim
// it holds appended it, and only a new claim appends another. endAttempt
// therefore changes the last element, and only if its token is the fenced
// token (a row claimed before the story existed has none to end). What it
// stores is the backend.Ending the Store gave, as given: the wording of the
// story is the Store's, the same on every backend.
//
// Parameters inside jsonb_build_object have no type to take from a column,
// so they are given one with CAST (not ::, which under the simple protocol
// would bind tighter than the minus sign of an inlined negative number).

// newAttempt is the jsonb object of a new claim with token tok, claimed at
// $7 by owner $8 (Claim's arguments), noted with note when it is not
// empty (DoTx's txNote, a constant of this package).
func newAttempt(tok, note string) string {
	a := `jsonb_build_object('t', ` + tok + `, 'c', CAST($7 AS bigint), 'o', CAST($8 AS text)`
	if note != "" {
		a += `, 'r', ` + quoteLiteral(note)
	}
	return a + `)`
}

// boundedStory is the jsonb array a with its first element and its
// latest ones, at most backend.KeptAttempts in all, as every backend keeps
// them.
func boundedStory(a string) string {
	return strings.NewReplacer("{a}", a, "{max}", strconv.Itoa(backend.KeptAttempts), "{latest}", strconv.Itoa(backend.KeptAttempts-1)).Replace(`
CASE WHEN jsonb_array_length({a}) <= {max} THEN {a}
ELSE jsonb_build_array({a} -> 0) || (
	SELECT jsonb_agg(q.e ORDER BY q.i) FROM jsonb_array_elements({a}) WITH ORDINALITY AS q(e, i)
	WHERE q.i > jsonb_array_length({a}) - {latest})
END`)
}

// endAttempt is the new value of the attempts column when the fenced claim
// (token $3) ends as the backend.Ending in the parameters from $n on says:
// its time, outcome, reason and status. An empty reason keeps a note the
// attempt has.
func endAttempt(n int) string {
	at, outcome, reason, status := "$"+strconv.Itoa(n), "$"+strconv.Itoa(n+1), "$"+strconv.Itoa(n+2), "$"+strconv.Itoa(n+3)
	return `attempts = CASE WHEN (attempts -> -1 ->> 't')::bigint = $3
	THEN jsonb_set(attempts, '{-1}', (attempts -> -1)
		|| jsonb_build_object('e', CAST(` + at + ` AS bigint), 'x', CAST(` + outcome + ` AS text), 's', CAST(` + status + ` AS bigint))
		|| CASE WHEN CAST(` + reason + ` AS text) = '' THEN '{}'::jsonb ELSE jsonb_build_object('r', CAST(` + reason + ` AS text)) END)
	ELSE attempts END`
}

func newQueries(n names) queries {
	r := strings.NewReplacer("{table}", n.table, "{seq}", quoteLiteral(n.seq), "{counts}", n.counts, "{zero}", zero,
		"{cols}", columns(""), "{r.cols}", columns("r"))
	// Every fenced write ends a hand-out (see Stale): the claim has moved
	// on, and whoever sweeps next must see it as it is now.
	const settled = `sweeper = '', sweep_until = {zero}`
	// complete's $8 to $11 are the attempt's Ending.
	complete := r.Replace(`
UPDATE {table} SET state = 2, result = $4, done_at = $5, expires_at = $6, recovered = $7,
	checks = 0, next_check = {zero}, attention = false, owner = '', ` + settled + `,
	` + endAttempt(8) + `
WHERE scope = $1 AND key = $2 AND state = 1 AND token = $3`)
	insert, takeOver := claimQueries(r, "")
	insertTx, takeOverTx := claimQueries(r, txNote)
	q := queries{
		insert: insert, takeOver: takeOver, insertTx: insertTx, takeOverTx: takeOverTx,

		complete: complete,

		// completeTx is complete inside DoTx's transaction, sent in one
		// round trip with the COMMIT that follows it. So it must abort the
		// transaction when the fence refuses (no row matched): the cast of
		// fencedText fails, the COMMIT is skipped, and DoTx rolls back.
		// The CASE depends on the count, so the planner cannot fold the
		// failing cast into an error of every execution.
		completeTx: `
WITH done AS (` + complete + `
	RETURNING 1
)
SELECT CAST(CASE WHEN count(*) = 1 THEN '1' ELSE ` + quoteLiteral(fencedText) + ` END AS integer) FROM done`,

		// release's $7 to $10 are the attempt's Ending.
		release: r.Replace(`
UPDATE {table} SET state = 3, done_at = $4, expires_at = $5, recovered = $6,
	checks = 0, next_check = {zero}, attention = false, owner = '', ` + settled + `,
	` + endAttempt(7) + `
WHERE scope = $1 AND key = $2 AND state = 1 AND token = $3`),

		extend: r.Replace(`
UPDATE {table} SET lease_ends = $4, ` + settled + `
WHERE scope = $1 AND key = $2 AND state = 1 AND token = $3`),

		// hold's $5 is the note of the held claim's attempt, the last one
		// if its token is the fenced token (see endAttempt).
		hold: r.Replace(`
UPDATE {table} SET lease_ends = $4, ` + settled + `,
	attempts = CASE WHEN (attempts -> -1 ->> 't')::bigint = $3
	THEN jsonb_set(attempts, '{-1}', (attempts -> -1) || jsonb_build_object('r', CAST($5 AS text)))
	ELSE attempts END
WHERE scope = $1 AND key = $2 AND state = 1 AND token = $3`),

		reseal: r.Replace(`
UPDATE {table} SET result = $4 WHERE scope = $1 AND key = $2 AND state = 2 AND token = $3`),

		deferTo: r.Replace(`
UPDATE {table} SET checks = $4, next_check = $5, attention = $6, ` + settled + `
WHERE scope = $1 AND key = $2 AND state = 1 AND token = $3`),

		get: r.Replace(`SELECT ` + countedColumns("r", "c") + ` FROM {table} AS r ` + countsJoin("r") + `
WHERE r.scope = $1 AND r.key = $2`),
		peek:     r.Replace(`SELECT {cols} FROM {table} WHERE scope = $1 AND key = $2`),
		getBrief: r.Replace(`SELECT ` + briefColumns + ` FROM {table} WHERE scope = $1 AND key = $2`),

		// stale reads the due claims through the partial index on open
		// claims, skipping rows another transaction holds, and hands them
		// to this instance ($2) until $4. A row handed to another instance
		// is skipped until its hand-out ends; one handed to this instance
		// comes back. Under READ COMMITTED a row that another instance
		// handed out after this statement's snapshot was taken is locked on
		// its newest version and checked again, so two instances never get
		// the same row from statements that overlap. The rows are locked by
		// this statement, so their ctids hold until it writes them: the
		// write is a TID scan of exactly the rows chosen, whatever the
		// table's size. The counts are added to what it returns.
		stale: r.Replace(`
WITH h AS (` + staleUpdate + `)
SELECT ` + countedColumns("h", "c") + ` FROM h ` + countsJoin("h")),

		// reclaim deletes a batch of expired records through the partial
		// index on expiry, as stale chooses its rows. A row locked by a
		// claim in flight is skipped: the claim may be reviving it. A row
		// claimed again since the snapshot is locked on its newest version
		// and checked again, so a live record is never deleted.
		//
		// The counts of the deleted records go with them, in the same
		// statement. Their rows are locked first in (scope, key) order, as
		// tally locks them, so that a flush and a reclaim sharing records
		// never wait for each other in a cycle. Counts a flush inserts
		// after this statement's snapshot are not seen: such a row is an
		// earlier life's to the key's next record (see tally.go).
		reclaim: r.Replace(`
WITH gone AS (` + reclaimDelete + `
), doomed AS (
	SELECT c.scope, c.key FROM {counts} AS c JOIN gone AS g ON c.scope = g.scope AND c.key = g.key
	ORDER BY c.scope, c.key
	FOR UPDATE OF c
), forgot AS (
	DELETE FROM {counts} AS c USING doomed AS d WHERE c.scope = d.scope AND c.key = d.key
)
SELECT scope, key, token FROM gone`),

		scan: r.Replace(`
SELECT ` + countedColumns("r", "c") + ` FROM {table} AS r ` + countsJoin("r") + `
WHERE (r.scope, r.key) > ($1, $2) ORDER BY r.scope, r.key LIMIT $3`),

		tally: r.Replace(tallyUpsert),
	}
	lateQueries(&q, r)
	return q
}

// staleUpdate is stale's UPDATE, returning the rows it handed out.
const staleUpdate = `
UPDATE {table} AS r SET sweeper = $2, sweep_until = $4
WHERE ctid = ANY(ARRAY(
	SELECT ctid FROM {table}
	WHERE state = 1 AND NOT attention AND lease_ends <= $1 AND next_check <= $1
		AND (sweep_until <= $1 OR sweeper = $2)
	ORDER BY lease_ends
	LIMIT $3
	FOR UPDATE SKIP LOCKED
))
RETURNING {r.cols}`

// reclaimDelete is reclaim's DELETE of the records, returning what it
// deleted.
const reclaimDelete = `
DELETE FROM {table}
WHERE ctid = ANY(ARRAY(
	SELECT ctid FROM {table}
	WHERE state <> 1 AND expires_at <= $1
	ORDER BY expires_at
	LIMIT $2
	FOR UPDATE SKIP LOCKED
))
RETURNING scope, key, token`

// claimQueries returns Claim's two statements (see Claim), the new attempt
// noted with note when it is not empty.
func claimQueries(r *strings.Replacer, note string) (insert, takeOver string) {
	// insert claims an absent key. DO NOTHING neither waits for nor
	// locks a row that exists: the statement that follows deals with it.
	// A conflict still draws a token from the sequence; the gap is
	// harmless. The token is drawn once, for the token column and the
	// first attempt. It returns the token alone: the rest of the row is
	// what Claim sent, and Claim builds the record from it (fresh), so
	// that the claim of every first request neither sends the row back
	// nor decodes it.
	insert = r.Replace(`
INSERT INTO {table} AS r (` + recordColumns + `, sweeper, sweep_until)
SELECT $1, $2, $3, 1, $4, n.tok, $5, {zero}, $6, NULL, $7, $7, {zero}, 1, 0, {zero}, false, '', $8,
	jsonb_build_array(` + newAttempt("n.tok", note) + `), 0, {zero}, 0, 0, {zero}, false,
	'', {zero}
FROM (SELECT nextval({seq}) AS tok) AS n
ON CONFLICT (scope, key) DO NOTHING
RETURNING token`)

	// takeOver claims a released key, or an expired done one, and
	// otherwise reads the stored row. The UPDATE is atomic: under READ
	// COMMITTED a concurrent writer of the row makes it wait, then
	// evaluate its WHERE again on the row's newest version, so of two
	// claimers only one finds the key claimable. The read that follows
	// in the same statement sees the statement's snapshot, which may be
	// older than what the UPDATE saw; Claim checks what it read and
	// tries again if that was claimable.
	//
	// A released record's life goes on: its story and counts are kept
	// (those of the counts table too: the claimed record is returned with
	// them) and the new attempt appended. An expired one starts afresh,
	// its claim count at 1, and the counts table's row of the old life is
	// deleted in the same statement. The token is drawn by the sub-select
	// that also builds the story, so it is drawn only for a row that is
	// claimed, once, for both columns.
	//
	// The EXISTS of forgot is evaluated once, before its scan: a claim
	// that takes nothing (a replay through the batch, a fresh key)
	// reads nothing of the counts.
	//
	// A stored row that was not claimed is returned with the counts of
	// its own columns only, as read-first's SELECT (peek) returns it: the
	// Store reads no counts from Claim, and a replay stays a single-row
	// SELECT of the records table.
	//
	// When the insert claimed the key, the batch's second statement has
	// nothing to do: mine finds the row holding the token the insert drew
	// (the session's currval of the sequence, which the insert always
	// draws), and both the UPDATE and the read are skipped by a one-time
	// filter. That keeps the fresh key's claim, the cycle of every first
	// request, at the cost of one primary-key probe, where it otherwise
	// ran the UPDATE's probe and sent the row back a second time
	// (docs/pgstore-replay.md, "The cycle's cost").
	takeOver = r.Replace(`
WITH mine AS (
	SELECT EXISTS (SELECT FROM {table} WHERE scope = $1 AND key = $2 AND token = currval({seq})) AS m
), claimed AS (` + strings.Replace(takeOverUpdate(note), "\n\tRETURNING {r.cols}",
		"\n\t\tAND NOT (SELECT m FROM mine)\n\tRETURNING {r.cols}", 1) + `
), forgot AS (
	DELETE FROM {counts} WHERE scope = $1 AND key = $2 AND EXISTS (SELECT FROM claimed WHERE claims = 1)
)
SELECT true, ` + countedColumns("r", "c") + ` FROM claimed AS r
	LEFT JOIN {counts} AS c ON r.claims > 1 AND c.scope = r.scope AND c.key = r.key AND c.life = r.first_seen
UNION ALL
SELECT false, {cols} FROM {table} WHERE scope = $1 AND key = $2 AND NOT EXISTS (SELECT FROM claimed)
	AND NOT (SELECT m FROM mine)`)
	return insert, takeOver
}

// takeOverUpdate is the UPDATE of takeOver, returning the claimed row:
// the new attempt noted with note when it is not empty.
func takeOverUpdate(note string) string {
	return `
	UPDATE {table} AS r SET
		format = $3, state = 1, fingerprint = $4, lease_ends = $5,
		expires_at = {zero}, retention = $6, result = NULL,
		first_seen = CASE WHEN r.state = 3 THEN r.first_seen ELSE $7 END,
		claimed_at = $7, done_at = {zero},
		claims = CASE WHEN r.state = 3 THEN r.claims + 1 ELSE 1 END,
		checks = 0, next_check = {zero}, attention = false, recovered = '', owner = $8,
		(token, attempts) = (
			SELECT n.tok, ` + boundedStory("s.a") + `
			FROM (SELECT nextval({seq}) AS tok) AS n, LATERAL (
				SELECT CASE WHEN r.state = 3 THEN r.attempts ELSE '[]' END
					|| jsonb_build_array(` + newAttempt("n.tok", note) + `) AS a
			) AS s
		),
		replays = CASE WHEN r.state = 3 THEN r.replays ELSE 0 END,
		last_replay = CASE WHEN r.state = 3 THEN r.last_replay ELSE {zero} END,
		conflicts = CASE WHEN r.state = 3 THEN r.conflicts ELSE 0 END,
		mismatches = CASE WHEN r.state = 3 THEN r.mismatches ELSE 0 END,
		last_rejection = CASE WHEN r.state = 3 THEN r.last_rejection ELSE {zero} END,
		twice = r.state = 3 AND r.twice,
		sweeper = '', sweep_until = {zero}
	WHERE r.scope = $1 AND r.key = $2 AND (r.state = 3 OR (r.state = 2 AND r.expires_at <= $7))
	RETURNING {r.cols}`
}

// quoteLiteral quotes s as an SQL string literal.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// maxClaimRounds bounds how often Claim reads a row that was claimable when
// read but not when written to (it changed in between), before it reports
// the key unavailable. Each round means another writer made progress.
const maxClaimRounds = 16

// Claim implements backend.Backend. It sends two statements in one round trip
// (a pipelined batch): insert tries an absent key, takeOver a released or
// expired one, and returns the stored row when neither claims. A record it
// did not claim carries the counts of its row only, not those of the
// counts table, which the Store does not read from Claim (Get adds them).
// For DoTx (txMarked) the new attempt carries DoTx's mark (txNote),
// written with the claim itself.
func (b *Backend) Claim(ctx context.Context, scope, key string, a backend.ClaimArgs) (*backend.Record, bool, error) {
	if err := validate(scope, key); err != nil {
		return nil, false, err
	}
	// The statements' arguments, made once a statement needs them: a
	// replay on the read-first path needs none.
	var args []any
	claimArgs := func() []any {
		if args == nil {
			args = []any{scope, key, int16(backend.Format), []byte(a.Fingerprint), encodeTime(a.LeaseEnds),
				int64(a.Retention), encodeTime(a.Now), text(a.Owner)}
		}
		return args
	}
	insert, takeOver, note := b.q.insert, b.q.takeOver, ""
	if txMarked(ctx, scope, key) {
		insert, takeOver, note = b.q.insertTx, b.q.takeOverTx, txNote
	}
	fresh := func(token int64) *backend.Record { return freshRecord(scope, key, a, token, note) }
	var (
		rec     *backend.Record
		claimed bool
	)
	readFirst, insertFirst := b.mix.readFirst(), b.mix.insertFirst()
	err := b.run(ctx, "claim", func(ctx context.Context) error {
		var err error
		switch {
		case readFirst:
			if rec, err = b.read(ctx, scope, key, a.Now, a.Brief); err != nil || rec != nil {
				return err
			}
		case insertFirst:
			var token int64
			if err = b.pool.QueryRow(ctx, insert, claimArgs()...).Scan(&token); err == nil {
				rec, claimed = fresh(token), true
				return nil
			}
			if !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
			// The key exists: the batch decides (its insert conflicts
			// again, harmlessly).
		}
		for round := 0; ; round++ {
			var settled bool
			rec, claimed, settled, err = b.claimOnce(ctx, insert, takeOver, claimArgs(), a.Now, fresh)
			if err != nil || settled {
				return err
			}
			if round+1 >= maxClaimRounds {
				return fmt.Errorf("record changed under %d claim attempts", maxClaimRounds)
			}
		}
	})
	if err != nil {
		return nil, false, err
	}
	b.mix.note(!claimed)
	return rec, claimed, nil
}

// read is Claim's read-first path: one SELECT of the key's row. It returns
// the record when that is Claim's answer (a done record that has not
// expired, an open claim), and nil when the key may be claimable (absent,
// released, expired), for the insert-and-take-over batch to decide. A done
// record does not change until it expires, so the SELECT's snapshot is as
// good an answer as the batch's; for an open claim both are snapshots.
//
// With brief (backend.ClaimArgs.Brief: Store.Begin, which reads only what a
// replay needs) it selects the six columns of a replay (briefColumns)
// instead of the whole row with its story, and answers only a done record
// that has not expired; an open claim goes on to the batch, which returns
// it whole for the Store to judge its lease or resolve it.
func (b *Backend) read(ctx context.Context, scope, key string, now time.Time, brief bool) (*backend.Record, error) {
	var (
		rec *backend.Record
		err error
	)
	if brief {
		rec, err = scanBrief(b.pool.QueryRow(ctx, b.q.getBrief, scope, key), scope, key)
	} else {
		rec, err = scanRecord(b.pool.QueryRow(ctx, b.q.peek, scope, key))
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, err
	case rec.State == backend.StateReleased || rec.Expired(now):
		return nil, nil
	case brief && rec.State != backend.StateDone:
		return nil, nil // an open claim: the batch returns it whole
	}
	return rec, nil
}

// Claim reads first (Backend.read) when most recent claims found their
// key taken: a replay then costs one plain SELECT, where the batch runs an
// INSERT that conflicts and an UPDATE that matches nothing before its
// read, while a claim of a fresh key pays a round trip more. The measured
// costs behind the threshold are in docs/pgstore-replay.md.
//
// Claim sends its INSERT alone when almost every recent claim claimed:
// a fresh key's claim is then one statement, the INSERT a bare pgx client
// sends, and a key that exists pays a round trip more (the batch follows).
const (
	mixScale        = 1 << 10 // claimMix.share's unit: 1/mixScale
	mixWeight       = 16      // each answer moves the share by 1/mixWeight of the way
	readFirstFrom   = mixScale * 3 / 4
	insertFirstUpTo = mixScale / 16
)

// Claim's modes (claimMix.mode): automatic, or fixed by a test: the
// batch alone, a SELECT first, the INSERT first.
const (
	readFirstAuto = iota
	readFirstNever
	readFirstAlways
	insertFirstAlways
)

// claimMix is how Claim chooses its path: a moving share of the recent
// answers that were no claim (a done record or an open claim).
type claimMix struct {
	mode  int
	share atomic.Int64 // in 1/mixScale
}

func (m *claimMix) readFirst() bool {
	switch m.mode {
	case readFirstNever:
		return false
	case readFirstAlways:
		return true
	}
	return m.share.Load() >= readFirstFrom
}

func (m *claimMix) insertFirst() bool {
	switch m.mode {
	case readFirstNever, readFirstAlways:
		return false
	case insertFirstAlways:
		return true
	}
	return m.share.Load() <= insertFirstUpTo
}

// note counts one answer. Concurrent notes may overwrite each other: the
// share is an estimate, and a lost step changes it by 1/mixWeight at most.
func (m *claimMix) note(taken bool) {
	s, target := m.share.Load(), int64(0)
	if taken {
		target = mixScale
	}
	m.share.Store(s + (target-s)/mixWeight)
}

// freshRecord is the record Claim's insert wrote for a, with token: what
// reading the row back would decode (times through their stored form).
func freshRecord(scope, key string, a backend.ClaimArgs, token int64, note string) *backend.Record {
	now := decodeTime(encodeTime(a.Now))
	owner := text(a.Owner)
	return &backend.Record{
		Format:      backend.Format,
		Scope:       scope,
		Key:         key,
		State:       backend.StateInProgress,
		Fingerprint: a.Fingerprint,
		Token:       uint64(token),
		LeaseEnds:   decodeTime(encodeTime(a.LeaseEnds)),
		Retention:   a.Retention,
		FirstSeen:   now,
		ClaimedAt:   now,
		Claims:      1,
		Owner:       owner,
		Attempts:    []backend.Attempt{{Token: uint64(token), ClaimedAt: now, Owner: owner, Reason: note}},
	}
}

// claimOnce sends one claim batch; fresh builds the record of a claim its
// insert made. settled is false when the row it read was claimable or gone
// by the time it read it: the caller tries again.
func (b *Backend) claimOnce(ctx context.Context, insert, takeOver string, args []any, now time.Time,
	fresh func(token int64) *backend.Record) (rec *backend.Record, claimed, settled bool, err error) {
	batch := &pgx.Batch{}
	batch.Queue(insert, args...)
	batch.Queue(takeOver, args...)
	br := b.pool.SendBatch(ctx, batch)
	// Close reads what is left and reports a failed commit: a claim is
	// reported only once Close returned nil.
	defer func() {
		if cerr := br.Close(); cerr != nil && err == nil {
			rec, claimed, settled, err = nil, false, false, cerr
		}
	}()

	var token int64
	err = br.QueryRow().Scan(&token)
	switch {
	case err == nil:
		return fresh(token), true, true, nil
	case !errors.Is(err, pgx.ErrNoRows):
		return nil, false, false, err
	}

	var r row
	var took bool
	if err := br.QueryRow().Scan(r.dest(&took)...); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, false, false, nil // reclaimed in between: insert again
		}
		return nil, false, false, err
	}
	rec, err = r.record()
	if err != nil {
		return nil, false, false, err
	}
	if took {
		return rec, true, true, nil
	}
	if rec.State == backend.StateReleased || rec.Expired(now) {
		// An older snapshot than the UPDATE's: read again.
		return nil, false, false, nil
	}
	return rec, false, true, nil
}

// fenced runs one fenced UPDATE: args follow scope, key and token as $4 on.
func (b *Backend) fenced(ctx context.Context, op, scope, key string, token uint64, sql string, args ...any) error {
	if err := validate(scope, key); err != nil {
		return err
	}
	fenced := &backend.FencedError{Scope: scope, Key: key, Token: token}
	if token == 0 || token > math.MaxInt64 {
		return fenced // no sequence gives such a token
	}
	args = append([]any{scope, key, int64(token)}, args...)
	return b.run(ctx, op, func(ctx context.Context) error {
		tag, err := b.pool.Exec(ctx, sql, args...)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fenced
		}
		return nil
	})
}

// Complete implements backend.Backend.
func (b *Backend) Complete(ctx context.Context, scope, key string, token uint64, c backend.Completion) error {
	res := backend.EncodeResult(&c.Result)
	return b.fenced(ctx, "complete", scope, key, token, b.q.complete,
		append([]any{res, encodeTime(c.At), encodeTime(c.ExpiresAt), text(c.Recovered)}, ending(c.Ending)...)...)
}

// ending is the parameters of endAttempt for e.
func ending(e backend.Ending) []any {
	return []any{encodeTime(e.At), text(e.Outcome), text(e.Reason), int64(e.Status)}
}

// Release implements backend.Backend.
func (b *Backend) Release(ctx context.Context, scope, key string, token uint64, r backend.Releasing) error {
	return b.fenced(ctx, "release", scope, key, token, b.q.release,
		append([]any{encodeTime(r.At), encodeTime(r.ExpiresAt), text(r.Reason)}, ending(r.Ending)...)...)
}

// Extend implements backend.Backend.
func (b *Backend) Extend(ctx context.Context, scope, key string, token uint64, leaseEnds time.Time) error {
	return b.fenced(ctx, "extend", scope, key, token, b.q.extend, encodeTime(leaseEnds))
}

// Hold implements backend.Holder.
func (b *Backend) Hold(ctx context.Context, scope, key string, token uint64, leaseEnds time.Time, note string) error {
	return b.fenced(ctx, "hold", scope, key, token, b.q.hold, encodeTime(leaseEnds), note)
}

var _ backend.Holder = (*Backend)(nil)

// Reseal implements backend.Resealer.
func (b *Backend) Reseal(ctx context.Context, scope, key string, token uint64, res backend.Result) error {
	enc := backend.EncodeResult(&res)
	return b.fenced(ctx, "reseal", scope, key, token, b.q.reseal, enc)
}

var _ backend.Resealer = (*Backend)(nil)

// Defer implements backend.Backend.
func (b *Backend) Defer(ctx context.Context, scope, key string, token uint64, d backend.Deferral) error {
	return b.fenced(ctx, "defer", scope, key, token, b.q.deferTo,
		int32(min(max(d.Checks, 0), math.MaxInt32)), encodeTime(d.NextCheck), d.Attention)
}

// Get implements backend.Backend. The record's counts are those of its
// row added to those of the counts table (tally.go).
func (b *Backend) Get(ctx context.Context, scope, key string) (*backend.Record, error) {
	if err := validate(scope, key); err != nil {
		return nil, err
	}
	var rec *backend.Record
	err := b.run(ctx, "get", func(ctx context.Context) error {
		var err error
		rec, err = scanRecord(b.pool.QueryRow(ctx, b.q.get, scope, key))
		if errors.Is(err, pgx.ErrNoRows) {
			return backend.ErrNotFound
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return rec, nil
}

// Stale implements backend.Backend. It hands the claims it returns to this
// Backend for Options.HandOut of store time (see the package doc): other
// Backends on the table do not get them until then, or until a fenced
// write on a claim ends its hand-out. This Backend gets them again, so
// calling Stale twice gives the same answer. A row that another
// transaction holds at the moment is skipped, so fewer than limit records
// do not prove that nothing more is due.
func (b *Backend) Stale(ctx context.Context, now time.Time, limit int) ([]*backend.Record, error) {
	if limit <= 0 {
		return nil, nil
	}
	var out []*backend.Record
	err := b.run(ctx, "stale", func(ctx context.Context) error {
		out = out[:0]
		rows, err := b.pool.Query(ctx, b.q.stale, encodeTime(now), b.id, limit, encodeTime(now.Add(b.handOut)))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			rec, err := scanRecord(rows)
			if err != nil {
				return err
			}
			out = append(out, rec)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	// RETURNING keeps no order: sort as the due rows were chosen.
	slices.SortFunc(out, func(x, y *backend.Record) int {
		return cmp.Or(x.LeaseEnds.Compare(y.LeaseEnds), cmp.Compare(x.Scope, y.Scope), cmp.Compare(x.Key, y.Key))
	})
	return out, nil
}

// Reclaim implements backend.Backend. It deletes at most limit rows in one
// statement. Rows held by a transaction in flight (a claim reviving the
// key, another instance's Reclaim) are skipped and left for a later call.
func (b *Backend) Reclaim(ctx context.Context, now time.Time, limit int) ([]backend.Ref, error) {
	if limit <= 0 {
		return nil, nil
	}
	var refs []backend.Ref
	err := b.run(ctx, "reclaim", func(ctx context.Context) error {
		refs = refs[:0]
		rows, err := b.pool.Query(ctx, b.q.reclaim, encodeTime(now), limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var ref backend.Ref
			var token int64
			if err := rows.Scan(&ref.Scope, &ref.Key, &token); err != nil {
				return err
			}
			ref.Token = uint64(token)
			refs = append(refs, ref)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return refs, nil
}

// scanPage is how many rows Scan reads per statement.
const scanPage = 256

// Scan implements backend.Lister. It reads the table in pages in (scope, key)
// order, each page a statement of its own, so fn may take its time and call
// the Backend: no transaction or connection is held while fn runs. Records
// written during a Scan may or may not be seen.
func (b *Backend) Scan(ctx context.Context, fn func(*backend.Record) bool) error {
	var lastScope, lastKey string
	for {
		var page []*backend.Record
		err := b.run(ctx, "scan", func(ctx context.Context) error {
			page = page[:0]
			rows, err := b.pool.Query(ctx, b.q.scan, lastScope, lastKey, scanPage)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				rec, err := scanRecord(rows)
				if err != nil {
					return err
				}
				page = append(page, rec)
			}
			return rows.Err()
		})
		if err != nil {
			return err
		}
		for _, rec := range page {
			if !fn(rec) {
				return nil
			}
		}
		if len(page) < scanPage {
			return nil
		}
		lastScope, lastKey = page[len(page)-1].Scope, page[len(page)-1].Key
	}
}

func validate(scope, key string) error {
	if err := backend.ValidateKey(key); err != nil {
		return err
	}
	return backend.ValidateStoredScope(scope)
}
