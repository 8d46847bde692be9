package pgstore

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/idemkit/idem/backend"
)

var _ backend.Tallier = (*Backend)(nil)

// tallyBatch is the most records one tally statement updates. A statement
// holds the locks of the rows it updated until it commits; a bound keeps
// that short (and the statement within StatementTimeout) when the Store
// hands over a large batch, at the price of one round trip per batch.
const tallyBatch = 4096

// AddTallies implements backend.Tallier. It adds the counts of up to
// tallyBatch records in one UPDATE, adding counts and keeping the latest of
// the last times; records that no longer exist are skipped. Several
// tallies for one record are merged first. A larger slice takes one
// statement per tallyBatch records, each committed on its own: an error
// may leave the batches before it applied.
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
	// Key order, the byte order of the "C" collation of the primary key,
	// so that concurrent batches lock their common rows in the same order.
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
