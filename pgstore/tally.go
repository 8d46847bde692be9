package pgstore

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/idemkit/idem/backend"
)

var _ backend.Tallier = (*Backend)(nil)

// Counts beside the records.
//
// Replays and rejections are counted by the Store in memory and reach the
// backend in batches (backend.Tallier). Adding them to the records' own
// columns would make every counted replay an UPDATE of its record's row,
// and PostgreSQL writes a new version of the whole row (result and story
// included) and its WAL. So the counts go to a narrow table of their own,
// Table_counts: one row per counted record, which a flush inserts or adds
// to (an UPDATE of a few numbers, heap-only where the page has room), and
// the records table is only read. Get, Scan and Stale add a record's row
// of counts to the counts in its own columns (a LEFT JOIN); those columns
// keep what was counted before schema version 4, and what instances of an
// older release still running write there.
//
// The counts of a record die with it: Reclaim deletes the records' rows of
// counts in its statement, and a claim of an expired record (a new life)
// deletes the old life's in its own; a claim of a released record goes on
// with them. A row of counts also names the life it belongs to (life: the
// record's first_seen when the flush read it), and reads add it only to
// that life. That covers what the deletes cannot see: counts a flush
// inserts for a record that a concurrent Reclaim or claim has just ended,
// and the rows an older release's Reclaim and claims leave behind. Such a
// row counts for nothing; the next flush for the key's new life replaces
// it, and the next Reclaim of the key deletes it.
//
// A flush reads the records it counts (for their life, and to skip those
// that are gone) without locking them, and locks the rows of counts it
// writes in (scope, key) order, as Reclaim locks the rows it deletes, so
// that no two statements wait for each other in a cycle.

// tallyUpsert adds a batch of counts, one array element per record, in one
// statement. A record that no longer exists matches nothing and is
// skipped. AddTallies sends each record once (ON CONFLICT DO UPDATE may
// not change one row twice). INSERT ... SELECT takes the rows in the
// SELECT's order, so the rows of counts are inserted or locked in (scope,
// key) order. Counts of the life the row holds are added to it; a later
// life's replace it; an earlier life's (read before a concurrent claim
// started a new one) are dropped.
const tallyUpsert = `
INSERT INTO {counts} AS c (scope, key, life, replays, conflicts, mismatches, last_replay, last_rejection)
SELECT r.scope, r.key, r.first_seen, t.replays, t.conflicts, t.mismatches, t.last_replay, t.last_rejection
FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bigint[])
	AS t(scope, key, replays, conflicts, mismatches, last_replay, last_rejection)
JOIN {table} AS r ON r.scope = t.scope AND r.key = t.key
ORDER BY r.scope, r.key
ON CONFLICT (scope, key) DO UPDATE SET
	replays = CASE WHEN c.life = excluded.life THEN c.replays + excluded.replays ELSE excluded.replays END,
	conflicts = CASE WHEN c.life = excluded.life THEN c.conflicts + excluded.conflicts ELSE excluded.conflicts END,
	mismatches = CASE WHEN c.life = excluded.life THEN c.mismatches + excluded.mismatches ELSE excluded.mismatches END,
	last_replay = CASE WHEN c.life = excluded.life THEN greatest(c.last_replay, excluded.last_replay) ELSE excluded.last_replay END,
	last_rejection = CASE WHEN c.life = excluded.life THEN greatest(c.last_rejection, excluded.last_rejection)
		ELSE excluded.last_rejection END,
	life = excluded.life
WHERE c.life <= excluded.life`

// tallyBatch is the most records one tally statement writes. A statement
// holds the locks of the rows it wrote until it commits; a bound keeps
// that short (and the statement within StatementTimeout) when the Store
// hands over a large batch, at the price of one round trip per batch.
const tallyBatch = 4096

// AddTallies implements backend.Tallier. It adds the counts of up to
// tallyBatch records in one statement (tallyUpsert), adding counts and
// keeping the latest of the last times; records that no longer exist are
// skipped. Several tallies for one record are merged first. A larger slice
// takes one statement per tallyBatch records, each committed on its own:
// an error may leave the batches before it applied.
func (b *Backend) AddTallies(ctx context.Context, tallies []backend.Tally) error {
	merged := make(map[[2]string]*backend.Tally, len(tallies))
	for _, t := range tallies {
		if validate(t.Scope, t.Key) != nil {
			continue // no such record can exist
		}
		k := [2]string{t.Scope, t.Key}
		if m := merged[k]; m != nil {
			m.Replays += t.Replays
			m.Conflicts += t.Conflicts
			m.Mismatches += t.Mismatches
			m.LastReplay = later(m.LastReplay, t.LastReplay)
			m.LastRejection = later(m.LastRejection, t.LastRejection)
			continue
		}
		merged[k] = &t
	}
	if len(merged) == 0 {
		return nil
	}
	all := make([]*backend.Tally, 0, len(merged))
	for _, t := range merged {
		all = append(all, t)
	}
	// Key order, the byte order of the "C" collation of the primary key:
	// the order tallyUpsert writes in, so that batches split the same way.
	slices.SortFunc(all, func(x, y *backend.Tally) int {
		return cmp.Or(cmp.Compare(x.Scope, y.Scope), cmp.Compare(x.Key, y.Key))
	})
	for chunk := range slices.Chunk(all, tallyBatch) {
		n := len(chunk)
		scopes, keys := make([]string, n), make([]string, n)
		replays, conflicts, mismatches := make([]int64, n), make([]int64, n), make([]int64, n)
		lastReplay, lastRejection := make([]int64, n), make([]int64, n)
		for i, t := range chunk {
			scopes[i], keys[i] = t.Scope, t.Key
			replays[i], conflicts[i], mismatches[i] = t.Replays, t.Conflicts, t.Mismatches
			lastReplay[i], lastRejection[i] = encodeTime(t.LastReplay), encodeTime(t.LastRejection)
		}
		err := b.run(ctx, "tally", func(ctx context.Context) error {
			_, err := b.pool.Exec(ctx, b.q.tally, scopes, keys, replays, conflicts, mismatches, lastReplay, lastRejection)
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
