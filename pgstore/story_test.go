package pgstore_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/pgstore"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// What the conformance suite's story tests cannot see: the story through
// Stale and Scan, text made storable, tallies sent to the backend directly
// and from several instances at once, and a table of the first schema
// version upgraded under its rows.

func TestBackend_Story_InEveryRead(t *testing.T) {
	b := newBackend(t, pool(t), nil)
	a := claimArgs("fp", epoch)
	a.Owner = "own\xffer"
	rec, claimed, err := b.Claim(ctx, "s", "k", a)
	require.NoError(t, err)
	require.True(t, claimed)
	want := []backend.Attempt{{Token: rec.Token, ClaimedAt: epoch, Owner: "own\uFFFDer"}}
	require.Equal(t, want, rec.Attempts)

	stale, err := b.Stale(ctx, epoch.Add(lease), 10)
	require.NoError(t, err)
	require.Len(t, stale, 1)
	require.Equal(t, want, stale[0].Attempts)

	// Extend and Defer leave the story alone; a reason with bytes text
	// cannot hold is made storable, as the Recovered column's is.
	require.NoError(t, b.Extend(ctx, "s", "k", rec.Token, epoch.Add(time.Hour)))
	require.NoError(t, b.Defer(ctx, "s", "k", rec.Token, backend.Deferral{Checks: 1, NextCheck: epoch}))
	at := epoch.Add(1500 * time.Millisecond).Add(7)
	require.NoError(t, b.Release(ctx, "s", "k", rec.Token, backend.Releasing{At: at, ExpiresAt: at.Add(retention), Reason: "nul\x00 and \xff",
		Ending: backend.Ending{At: at, Outcome: "released", Reason: "nul\x00 and \xff"}}))
	want[0].EndedAt, want[0].Outcome, want[0].Reason = at, "released", "nul and \uFFFD"
	var scanned []*idem.Record
	require.NoError(t, b.Scan(ctx, func(r *idem.Record) bool { scanned = append(scanned, r); return true }))
	require.Len(t, scanned, 1)
	require.Equal(t, want, scanned[0].Attempts)

	// The next claim goes on with the story; a completion ends it with
	// the Ending it is given, made storable.
	rec2, claimed, err := b.Claim(ctx, "s", "k", claimArgs("fp", at))
	require.NoError(t, err)
	require.True(t, claimed)
	require.NoError(t, b.Complete(ctx, "s", "k", rec2.Token, backend.Completion{
		Result: idem.Result{Status: 599}, At: at.Add(time.Second), ExpiresAt: at.Add(retention), Recovered: "committed\x00",
		Ending: backend.Ending{At: at.Add(time.Second), Outcome: "recovered: committed\x00", Status: 599}}))
	got, err := b.Get(ctx, "s", "k")
	require.NoError(t, err)
	want = append(want, backend.Attempt{Token: rec2.Token, ClaimedAt: at, Owner: "test",
		EndedAt: at.Add(time.Second), Outcome: "recovered: committed", Status: 599})
	require.Equal(t, want, got.Attempts)

	// A holder fenced out changes nothing in the story either.
	require.ErrorIs(t, b.Complete(ctx, "s", "k", rec.Token, backend.Completion{Result: result("late"), At: at, ExpiresAt: at}), idem.ErrFenced)
	got, err = b.Get(ctx, "s", "k")
	require.NoError(t, err)
	require.Equal(t, want, got.Attempts)
}

func TestBackend_AddTallies(t *testing.T) {
	b := newBackend(t, pool(t), nil)
	done, _, err := b.Claim(ctx, "s", "done", claimArgs("fp", epoch))
	require.NoError(t, err)
	require.NoError(t, b.Complete(ctx, "s", "done", done.Token, backend.Completion{Result: result("x"), At: epoch, ExpiresAt: epoch.Add(retention)}))
	open, _, err := b.Claim(ctx, "s", "open", claimArgs("fp", epoch))
	require.NoError(t, err)

	t1, t2 := epoch.Add(time.Second+3), epoch.Add(2*time.Second+5)
	require.NoError(t, b.AddTallies(ctx, nil))
	require.NoError(t, b.AddTallies(ctx, []backend.Tally{
		{Scope: "s", Key: "done", Replays: 2, LastReplay: t2},
		{Scope: "s", Key: "done", Replays: 1, Mismatches: 1, LastReplay: t1, LastRejection: t1}, // merged
		{Scope: "s", Key: "open", Conflicts: 4, LastRejection: t2},
		{Scope: "s", Key: "gone", Replays: 9, LastReplay: t2},       // skipped
		{Scope: "bad\nscope", Key: "k", Replays: 1, LastReplay: t2}, // cannot exist
	}))
	got, err := b.Get(ctx, "s", "done")
	require.NoError(t, err)
	require.Equal(t, [3]int64{3, 0, 1}, [3]int64{got.Replays, got.Conflicts, got.Mismatches})
	require.True(t, got.LastReplay.Equal(t2), "%v", got.LastReplay)
	require.True(t, got.LastRejection.Equal(t1))
	_, err = b.Get(ctx, "s", "gone")
	require.ErrorIs(t, err, idem.ErrNotFound, "a tally creates no record")

	// Counts add up; the last times are the latest, whatever order the
	// batches arrive in.
	require.NoError(t, b.AddTallies(ctx, []backend.Tally{{Scope: "s", Key: "done", Replays: 1, LastReplay: t1}}))
	got, err = b.Get(ctx, "s", "done")
	require.NoError(t, err)
	require.Equal(t, int64(4), got.Replays)
	require.True(t, got.LastReplay.Equal(t2))

	// A released record's counts go on into its next claim ...
	require.NoError(t, b.Release(ctx, "s", "open", open.Token, backend.Releasing{At: t2, ExpiresAt: t2.Add(retention), Reason: "r"}))
	again, claimed, err := b.Claim(ctx, "s", "open", claimArgs("fp", t2))
	require.NoError(t, err)
	require.True(t, claimed)
	require.Equal(t, int64(4), again.Conflicts)
	require.True(t, again.LastRejection.Equal(t2))
	require.Len(t, again.Attempts, 2)
	// ... and an expired one starts a new life without them.
	later := epoch.Add(2 * retention)
	fresh, claimed, err := b.Claim(ctx, "s", "done", claimArgs("fp", later))
	require.NoError(t, err)
	require.True(t, claimed)
	require.Zero(t, fresh.Replays+fresh.Conflicts+fresh.Mismatches)
	require.True(t, fresh.LastReplay.IsZero())
	require.True(t, fresh.LastRejection.IsZero())
	require.Equal(t, []backend.Attempt{{Token: fresh.Token, ClaimedAt: later, Owner: "test"}}, fresh.Attempts)
}

// Instances tallying the same records at once lose no count: each batch
// is one statement, and batches lock their rows in the same order.
func TestBackend_AddTallies_ConcurrentInstances(t *testing.T) {
	const keys, workers, rounds = 300, 6, 10
	b0 := newBackend(t, pool(t), nil)
	for i := range keys {
		_, _, err := b0.Claim(ctx, "s", fmt.Sprintf("k%03d", i), claimArgs("fp", epoch))
		require.NoError(t, err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds)
	for w := range workers {
		b := newBackend(t, newPool(t, 2), &pgstore.Options{Table: tableName(b0)})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				batch := make([]backend.Tally, keys)
				for i := range batch {
					batch[i] = backend.Tally{Scope: "s", Key: fmt.Sprintf("k%03d", i), Replays: 1, Conflicts: int64(w),
						LastReplay: epoch.Add(time.Duration(w*rounds+r) * time.Second)}
				}
				rand.Shuffle(len(batch), func(i, j int) { batch[i], batch[j] = batch[j], batch[i] })
				errs <- b.AddTallies(ctx, batch)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	last := epoch.Add(time.Duration(workers*rounds-1) * time.Second)
	require.NoError(t, b0.Scan(ctx, func(r *idem.Record) bool {
		require.Equal(t, int64(workers*rounds), r.Replays, r.Key)
		require.Equal(t, int64(rounds*workers*(workers-1)/2), r.Conflicts, r.Key)
		require.True(t, r.LastReplay.Equal(last), r.Key)
		return true
	}))
}

// A table made by the first schema version, with rows in it, is upgraded:
// its rows have an empty story and no counts, and go on from there.
func TestNew_UpgradesVersion1(t *testing.T) {
	p := newPool(t, 2) // its cached statements must not outlive the table's first shape
	b := newBackend(t, p, nil)
	table := tableName(b)
	open, _, err := b.Claim(ctx, "s", "open", claimArgs("fp", epoch))
	require.NoError(t, err)
	rel, _, err := b.Claim(ctx, "s", "released", claimArgs("fp", epoch))
	require.NoError(t, err)
	require.NoError(t, b.Release(ctx, "s", "released", rel.Token, backend.Releasing{At: epoch, ExpiresAt: epoch.Add(retention)}))
	p.Close()
	// Back to version 1: what migrations 2 to 4 add is dropped.
	mustExec(t, "ALTER TABLE "+b.Table()+" DROP COLUMN attempts, DROP COLUMN replays, DROP COLUMN last_replay, "+
		"DROP COLUMN conflicts, DROP COLUMN mismatches, DROP COLUMN last_rejection, DROP COLUMN twice")
	mustExec(t, "DROP TABLE "+countsTable(b))
	version := pgx.Identifier{server.schema, table + "_version"}.Sanitize()
	mustExec(t, "DELETE FROM "+version+" WHERE version > 1")

	b2 := newBackend(t, pool(t), &pgstore.Options{Table: table})
	var versions []int32
	rows, err := pool(t).Query(ctx, "SELECT version FROM "+version+" ORDER BY version")
	require.NoError(t, err)
	versions, err = pgx.CollectRows(rows, pgx.RowTo[int32])
	require.NoError(t, err)
	require.Equal(t, []int32{1, 2, 3, 4}, versions)

	got, err := b2.Get(ctx, "s", "open")
	require.NoError(t, err)
	require.Nil(t, got.Attempts)
	require.Zero(t, got.Replays)
	require.True(t, got.LastReplay.IsZero())
	require.True(t, got.LastRejection.IsZero())
	// The claim of version 1 ends without an attempt to end.
	require.NoError(t, b2.Complete(ctx, "s", "open", open.Token, backend.Completion{Result: result("x"), At: epoch, ExpiresAt: epoch.Add(retention)}))
	require.NoError(t, b2.AddTallies(ctx, []backend.Tally{{Scope: "s", Key: "open", Replays: 1, LastReplay: epoch}}))
	got, err = b2.Get(ctx, "s", "open")
	require.NoError(t, err)
	require.Nil(t, got.Attempts)
	require.Equal(t, int64(1), got.Replays)
	// The released record's next claim starts its story.
	next, claimed, err := b2.Claim(ctx, "s", "released", claimArgs("fp", epoch))
	require.NoError(t, err)
	require.True(t, claimed)
	require.Equal(t, 2, next.Claims)
	require.Equal(t, []backend.Attempt{{Token: next.Token, ClaimedAt: epoch, Owner: "test"}}, next.Attempts)
}
