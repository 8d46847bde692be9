package pgstore_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/pgstore"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// counts is what a record's counts read as.
type counts struct {
	Replays, Conflicts, Mismatches int64
	LastReplay, LastRejection      time.Time
}

func countsOf(rec *backend.Record) counts {
	return counts{rec.Replays, rec.Conflicts, rec.Mismatches, rec.LastReplay, rec.LastRejection}
}

// getCounts returns the counts b reads for the record of key in scope "s".
func getCounts(t *testing.T, b *pgstore.Backend, key string) counts {
	t.Helper()
	rec, err := b.Get(ctx, "s", key)
	require.NoError(t, err, key)
	return countsOf(rec)
}

// wideCounts returns the counts in the columns of key's records row.
func wideCounts(t *testing.T, b *pgstore.Backend, key string) (replays, conflicts int64) {
	t.Helper()
	require.NoError(t, pool(t).QueryRow(ctx, "SELECT replays, conflicts FROM "+b.Table()+
		" WHERE scope = 's' AND key = $1", key).Scan(&replays, &conflicts))
	return replays, conflicts
}

// countsRows returns how many rows of counts b's table holds for key.
func countsRows(t *testing.T, b *pgstore.Backend, key string) int {
	t.Helper()
	var n int
	require.NoError(t, pool(t).QueryRow(ctx, "SELECT count(*) FROM "+countsTable(b)+
		" WHERE scope = 's' AND key = $1", key).Scan(&n))
	return n
}

// rowVersion returns the ctid and xmin of key's records row: both change
// when the row is written.
func rowVersion(t *testing.T, b *pgstore.Backend, key string) string {
	t.Helper()
	var v string
	require.NoError(t, pool(t).QueryRow(ctx, "SELECT ctid::text || '/' || xmin::text FROM "+b.Table()+
		" WHERE scope = 's' AND key = $1", key).Scan(&v))
	return v
}

// done claims key in scope "s" at now and completes it, to expire after
// retention.
func done(t *testing.T, b *pgstore.Backend, key string, now time.Time) *backend.Record {
	t.Helper()
	rec, claimed, err := b.Claim(ctx, "s", key, claimArgs("fp", now))
	require.NoError(t, err)
	require.True(t, claimed, key)
	require.NoError(t, b.Complete(ctx, "s", key, rec.Token, backend.Completion{Result: result("x"), At: now,
		ExpiresAt: now.Add(retention)}))
	return rec
}

func tally(key string, replays, conflicts int64, at time.Time) backend.Tally {
	t := backend.Tally{Scope: "s", Key: key, Replays: replays, Conflicts: conflicts}
	if replays > 0 {
		t.LastReplay = at
	}
	if conflicts > 0 {
		t.LastRejection = at
	}
	return t
}

// Counts land in the table of counts, and the record's row is not
// written; they add up across batches and within one, keeping the
// latest times, and every read returns them.
func TestBackend_AddTallies_NarrowTable(t *testing.T) {
	b := newBackend(t, pool(t), nil)
	done(t, b, "k", epoch)
	before := rowVersion(t, b, "k")

	require.NoError(t, b.AddTallies(ctx, []backend.Tally{tally("k", 2, 0, epoch.Add(2*time.Second))}))
	require.NoError(t, b.AddTallies(ctx, []backend.Tally{
		tally("k", 1, 0, epoch.Add(time.Second)), // an earlier time: the later one stays
		tally("k", 0, 3, epoch.Add(3*time.Second)),
		{Scope: "s", Key: "k", Mismatches: 1, LastRejection: epoch.Add(4 * time.Second)},
		tally("gone", 5, 5, epoch), // no such record: skipped
	}))
	require.Equal(t, before, rowVersion(t, b, "k"), "the record's row is not written")
	replays, conflicts := wideCounts(t, b, "k")
	require.Zero(t, replays)
	require.Zero(t, conflicts)
	require.Equal(t, 1, countsRows(t, b, "k"))
	require.Zero(t, countsRows(t, b, "gone"))

	want := counts{Replays: 3, Conflicts: 3, Mismatches: 1, LastReplay: epoch.Add(2 * time.Second),
		LastRejection: epoch.Add(4 * time.Second)}
	require.Equal(t, want, getCounts(t, b, "k"))
	var scanned []counts
	require.NoError(t, b.Scan(ctx, func(rec *backend.Record) bool {
		scanned = append(scanned, countsOf(rec))
		return true
	}))
	require.Equal(t, []counts{want}, scanned)
}

// Counts of an open claim survive its completion, and are returned by
// Stale.
func TestBackend_AddTallies_OpenClaim(t *testing.T) {
	b := newBackend(t, pool(t), nil)
	rec, _, err := b.Claim(ctx, "s", "k", claimArgs("fp", epoch))
	require.NoError(t, err)
	require.NoError(t, b.AddTallies(ctx, []backend.Tally{tally("k", 0, 2, epoch.Add(time.Second))}))
	stale, err := b.Stale(ctx, epoch.Add(lease), 10)
	require.NoError(t, err)
	require.Len(t, stale, 1)
	require.Equal(t, int64(2), stale[0].Conflicts)
	require.True(t, stale[0].LastRejection.Equal(epoch.Add(time.Second)))

	require.NoError(t, b.Extend(ctx, "s", "k", rec.Token, epoch.Add(time.Hour)))
	require.NoError(t, b.Complete(ctx, "s", "k", rec.Token, backend.Completion{Result: result("x"), At: epoch,
		ExpiresAt: epoch.Add(retention)}))
	require.Equal(t, counts{Conflicts: 2, LastRejection: epoch.Add(time.Second)}, getCounts(t, b, "k"))
}

// A record's counts are deleted with it.
func TestBackend_Reclaim_DeletesCounts(t *testing.T) {
	b := newBackend(t, pool(t), nil)
	done(t, b, "old", epoch)
	done(t, b, "young", epoch.Add(time.Minute))
	require.NoError(t, b.AddTallies(ctx, []backend.Tally{tally("old", 1, 0, epoch), tally("young", 1, 0, epoch)}))

	refs, err := b.Reclaim(ctx, epoch.Add(retention), 10)
	require.NoError(t, err)
	require.Len(t, refs, 1)
	require.Equal(t, "old", refs[0].Key)
	require.Zero(t, countsRows(t, b, "old"))
	require.Equal(t, 1, countsRows(t, b, "young"))

	// A new record of the key starts with no counts.
	done(t, b, "old", epoch.Add(retention))
	require.Equal(t, counts{}, getCounts(t, b, "old"))
}

// A claim of an expired record starts a new life: the old one's counts
// are gone. A claim of a released record goes on with them.
func TestBackend_Claim_CountsOfLives(t *testing.T) {
	b := newBackend(t, pool(t), nil)
	done(t, b, "expired", epoch)
	rel, _, err := b.Claim(ctx, "s", "released", claimArgs("fp", epoch))
	require.NoError(t, err)
	require.NoError(t, b.AddTallies(ctx, []backend.Tally{tally("expired", 4, 1, epoch), tally("released", 0, 2, epoch)}))
	require.NoError(t, b.Release(ctx, "s", "released", rel.Token, backend.Releasing{At: epoch, ExpiresAt: epoch.Add(retention)}))
	require.NoError(t, b.AddTallies(ctx, []backend.Tally{tally("released", 0, 1, epoch.Add(time.Second))}))

	later := epoch.Add(retention)
	fresh, claimed, err := b.Claim(ctx, "s", "expired", claimArgs("fp", later))
	require.NoError(t, err)
	require.True(t, claimed)
	require.Equal(t, 1, fresh.Claims)
	require.Equal(t, counts{}, countsOf(fresh))
	require.Zero(t, countsRows(t, b, "expired"), "the old life's counts are deleted with the claim")
	require.Equal(t, counts{}, getCounts(t, b, "expired"))

	again, claimed, err := b.Claim(ctx, "s", "released", claimArgs("fp", later))
	require.NoError(t, err)
	require.True(t, claimed)
	require.Equal(t, 2, again.Claims)
	carried := counts{Conflicts: 3, LastRejection: epoch.Add(time.Second)}
	require.Equal(t, carried, countsOf(again))
	require.NoError(t, b.AddTallies(ctx, []backend.Tally{tally("released", 1, 0, later)}))
	require.NoError(t, b.Complete(ctx, "s", "released", again.Token, backend.Completion{Result: result("x"), At: later,
		ExpiresAt: later.Add(retention)}))
	carried.Replays, carried.LastReplay = 1, later
	require.Equal(t, carried, getCounts(t, b, "released"))
}

// A table of schema version 3, with counts in the records' columns, is
// upgraded to version 4 by New: every record reads the counts it had, and
// counts added after go to the table of counts and add up with them. An
// instance of version 3 still running goes on: its counts land in the
// records' columns, which reads add; what its deletes and claims leave in
// the table of counts counts for nothing.
func TestNew_UpgradesVersion3(t *testing.T) {
	table := uniqueTable("v3")
	opts := &pgstore.Options{Schema: server.schema, Table: table}
	old, err := pgstore.NewVersion3(ctx, pool(t), opts)
	require.NoError(t, err)
	defer old.Close()
	version := pgx.Identifier{server.schema, table + "_version"}.Sanitize()
	var latest int
	require.NoError(t, pool(t).QueryRow(ctx, "SELECT max(version) FROM "+version).Scan(&latest))
	require.Equal(t, 3, latest)
	var hasCounts bool
	require.NoError(t, pool(t).QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", pgx.Identifier{server.schema, table + "_counts"}.Sanitize()).Scan(&hasCounts))
	require.False(t, hasCounts)

	// Version 3 at work: a done record, an open claim, a released record,
	// counted in their columns.
	done(t, old, "done", epoch)
	_, _, err = old.Claim(ctx, "s", "open", claimArgs("fp", epoch))
	require.NoError(t, err)
	rel, _, err := old.Claim(ctx, "s", "released", claimArgs("fp", epoch))
	require.NoError(t, err)
	require.NoError(t, old.Release(ctx, "s", "released", rel.Token, backend.Releasing{At: epoch, ExpiresAt: epoch.Add(time.Minute)}))
	require.NoError(t, old.AddTallies(ctx, []backend.Tally{
		tally("done", 2, 1, epoch.Add(time.Second)), tally("open", 0, 3, epoch), tally("released", 1, 0, epoch),
	}))
	v3 := map[string]counts{
		"done":     {Replays: 2, Conflicts: 1, LastReplay: epoch.Add(time.Second), LastRejection: epoch.Add(time.Second)},
		"open":     {Conflicts: 3, LastRejection: epoch},
		"released": {Replays: 1, LastReplay: epoch},
	}
	for k, want := range v3 {
		require.Equal(t, want, getCounts(t, old, k), k)
	}

	b := newBackend(t, pool(t), &pgstore.Options{Table: table})
	rows, err := pool(t).Query(ctx, "SELECT version FROM "+version+" ORDER BY version")
	require.NoError(t, err)
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	require.NoError(t, err)
	require.Equal(t, []int32{1, 2, 3, 4}, versions)
	for k, want := range v3 {
		require.Equal(t, want, getCounts(t, b, k), "%s read after the upgrade", k)
		require.Zero(t, countsRows(t, b, k), "the migration moves no counts")
	}

	// Counted by the new release: into the table of counts, added to the
	// columns' counts when read.
	require.NoError(t, b.AddTallies(ctx, []backend.Tally{tally("done", 3, 0, epoch.Add(5*time.Second)), tally("open", 0, 1, epoch.Add(time.Second))}))
	replays, _ := wideCounts(t, b, "done")
	require.Equal(t, int64(2), replays)
	require.Equal(t, 1, countsRows(t, b, "done"))
	require.Equal(t, counts{Replays: 5, Conflicts: 1, LastReplay: epoch.Add(5 * time.Second), LastRejection: epoch.Add(time.Second)},
		getCounts(t, b, "done"))
	// Counted by the old release, still running: into the columns.
	require.NoError(t, old.AddTallies(ctx, []backend.Tally{tally("done", 1, 0, epoch.Add(6*time.Second))}))
	require.Equal(t, counts{Replays: 6, Conflicts: 1, LastReplay: epoch.Add(6 * time.Second), LastRejection: epoch.Add(time.Second)},
		getCounts(t, b, "done"))
	// The old release reads its columns only.
	require.Equal(t, int64(3), getCounts(t, old, "done").Replays)

	// The released record's next claim, by either release, goes on with
	// both counts.
	require.NoError(t, b.AddTallies(ctx, []backend.Tally{tally("released", 0, 1, epoch.Add(time.Second))}))
	again, claimed, err := old.Claim(ctx, "s", "released", claimArgs("fp", epoch.Add(2*time.Second)))
	require.NoError(t, err)
	require.True(t, claimed)
	require.Equal(t, counts{Replays: 1, Conflicts: 1, LastReplay: epoch, LastRejection: epoch.Add(time.Second)},
		getCounts(t, b, "released"))
	require.NoError(t, old.Complete(ctx, "s", "released", again.Token, backend.Completion{Result: result("x"),
		At: epoch.Add(2 * time.Second), ExpiresAt: epoch.Add(2*time.Second + retention)}))

	// The old release's Reclaim deletes the record and leaves its row of
	// counts; the key's next life does not take them up, and its first
	// count replaces them.
	refs, err := old.Reclaim(ctx, epoch.Add(retention), 10)
	require.NoError(t, err)
	require.Len(t, refs, 1)
	require.Equal(t, "done", refs[0].Key)
	require.Equal(t, 1, countsRows(t, b, "done"), "left by the old release")
	done(t, b, "done", epoch.Add(retention))
	require.Equal(t, counts{}, getCounts(t, b, "done"))
	require.NoError(t, b.AddTallies(ctx, []backend.Tally{tally("done", 1, 0, epoch.Add(retention))}))
	require.Equal(t, counts{Replays: 1, LastReplay: epoch.Add(retention)}, getCounts(t, b, "done"))

	// So does the old release's claim of an expired record, which
	// resets the columns' counts and leaves the table of counts alone.
	require.NoError(t, b.AddTallies(ctx, []backend.Tally{tally("released", 1, 0, epoch.Add(time.Hour))}))
	expiredAt := epoch.Add(2*time.Second + retention)
	fresh, claimed, err := old.Claim(ctx, "s", "released", claimArgs("fp", expiredAt))
	require.NoError(t, err)
	require.True(t, claimed)
	require.Equal(t, 1, fresh.Claims)
	require.Equal(t, 1, countsRows(t, b, "released"))
	require.Equal(t, counts{}, getCounts(t, b, "released"))

	// And a new instance of the old release cannot start on the new
	// schema.
	_, err = pgstore.NewVersion3(ctx, pool(t), opts)
	require.ErrorIs(t, err, pgstore.ErrSchemaVersion)
}

// The longest table name leaves room for the names made from it: the
// counts table, and its primary key's index (which PostgreSQL shortens).
func TestNew_LongestTableName(t *testing.T) {
	name := uniqueTable("long")
	name += strings.Repeat("x", pgstore.MaxTableLen-len(name))
	b := newBackend(t, pool(t), &pgstore.Options{Table: name})
	done(t, b, "k", epoch)
	require.NoError(t, b.AddTallies(ctx, []backend.Tally{tally("k", 1, 0, epoch)}))
	require.Equal(t, counts{Replays: 1, LastReplay: epoch}, getCounts(t, b, "k"))
}

// Flushes, Reclaims and claims of new lives on the same keys, from
// several instances at once, never wait for each other in a cycle: the
// server counts no deadlock (one would be retried, so the calls alone
// could not tell).
func TestBackend_Counts_NoDeadlock(t *testing.T) {
	const keys, rounds = 200, 30
	b0 := newBackend(t, pool(t), nil)
	key := func(i int) string { return fmt.Sprintf("k%03d", i) }
	for i := range keys {
		done(t, b0, key(i), epoch.Add(time.Duration(i)*time.Millisecond))
	}
	deadlocks := func() int64 {
		var n int64
		require.NoError(t, pool(t).QueryRow(ctx, "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()").Scan(&n))
		return n
	}
	before := deadlocks()

	var wg sync.WaitGroup
	errs := make(chan error, 4*rounds*keys)
	instance := func(fn func(b *pgstore.Backend, r int)) {
		b := newBackend(t, newPool(t, 4), &pgstore.Options{Table: tableName(b0)})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				fn(b, r)
			}
		}()
	}
	for range 2 {
		instance(func(b *pgstore.Backend, r int) {
			batch := make([]backend.Tally, keys)
			for i, j := range rand.Perm(keys) {
				batch[i] = tally(key(j), 1, 1, epoch)
			}
			errs <- b.AddTallies(ctx, batch)
		})
	}
	// Each round, the records of a tenth more keys have expired; one
	// instance reclaims them, the other claims some afresh.
	now := func(r int) time.Time { return epoch.Add(retention + time.Duration((r+1)*keys/rounds)*time.Millisecond) }
	instance(func(b *pgstore.Backend, r int) {
		_, err := b.Reclaim(ctx, now(r), keys)
		errs <- err
	})
	instance(func(b *pgstore.Backend, r int) {
		for _, i := range rand.Perm(keys)[:keys/10] {
			_, _, err := b.Claim(ctx, "s", key(i), claimArgs("fp", now(r)))
			errs <- err
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, before, deadlocks(), "deadlocks detected by the server")
}
