package pgstore

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// SetReadFirst fixes how Claim chooses its path: "auto" (the default),
// "never" (always the insert-and-take-over batch), "always" (a SELECT
// first) or "insert" (the INSERT alone first). For tests and benchmarks.
func SetReadFirst(b *Backend, mode string) {
	b.mix.mode = map[string]int{"auto": readFirstAuto, "never": readFirstNever, "always": readFirstAlways,
		"insert": insertFirstAlways}[mode]
}

// InsertsFirst reports whether b's next Claim sends its INSERT alone.
func InsertsFirst(b *Backend) bool { return b.mix.insertFirst() }

// ReadsFirst reports whether b's next Claim reads first.
func ReadsFirst(b *Backend) bool { return b.mix.readFirst() }

// NewVersion3 returns a Backend as the release of schema version 3 ran:
// its tables migrated up to version 3 only, its counts written into the
// records' columns (the UPDATE of that release), its reads and deletes
// knowing nothing of the counts table. Left running while New migrates
// the tables to the latest version, it is an instance of the previous
// release still at work during an upgrade.
func NewVersion3(ctx context.Context, pool *pgxpool.Pool, opts *Options) (*Backend, error) {
	b, n, err := open(ctx, pool, opts, 3)
	if err != nil {
		return nil, err
	}
	q := newQueries(n)
	r := strings.NewReplacer("{table}", n.table, "{seq}", quoteLiteral(n.seq), "{zero}", zero,
		"{cols}", columns(""), "{r.cols}", columns("r"))
	takeOver := func(note string) string {
		return r.Replace(`WITH claimed AS (` + takeOverUpdate(note) + `)
SELECT true, * FROM claimed
UNION ALL
SELECT false, {cols} FROM {table} WHERE scope = $1 AND key = $2 AND NOT EXISTS (SELECT FROM claimed)`)
	}
	q.takeOver, q.takeOverTx = takeOver(""), takeOver(txNote)
	q.get = q.peek
	q.scan = r.Replace(`SELECT {cols} FROM {table} WHERE (scope, key) > ($1, $2) ORDER BY scope, key LIMIT $3`)
	q.stale = r.Replace(staleUpdate)
	q.reclaim = r.Replace(reclaimDelete)
	q.tally = r.Replace(`
WITH t AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bigint[])
		AS t(scope, key, replays, conflicts, mismatches, last_replay, last_rejection)
), locked AS (
	SELECT r.scope, r.key FROM {table} AS r JOIN t ON r.scope = t.scope AND r.key = t.key
	ORDER BY r.scope, r.key
	FOR UPDATE OF r
)
UPDATE {table} AS r SET
	replays = r.replays + t.replays, conflicts = r.conflicts + t.conflicts, mismatches = r.mismatches + t.mismatches,
	last_replay = greatest(r.last_replay, t.last_replay), last_rejection = greatest(r.last_rejection, t.last_rejection)
FROM t JOIN locked AS l ON l.scope = t.scope AND l.key = t.key
WHERE r.scope = t.scope AND r.key = t.key`)
	b.q = q
	return b, nil
}
