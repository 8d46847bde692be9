package badgerstore_test

import (
	"context"
	"encoding/binary"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/badgerstore"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/badger"
	"github.com/stretchr/testify/require"
)

// countKeys returns how many keys of the Badger store behind s start with
// prefix.
func countKeys(t testing.TB, s *idem.Store, prefix byte) int {
	t.Helper()
	b := s.Backend().(*badgerstore.Backend)
	// A durable write is answered before Badger holds it; Scan waits until
	// Badger holds every answered write.
	require.NoError(t, b.Scan(bg, func(*backend.Record) bool { return false }))
	n := 0
	err := badgerstore.BadgerDB(b).View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefix}})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			n++
		}
		return nil
	})
	require.NoError(t, err)
	return n
}

// counts returns the replays, conflicts and mismatches Get reports.
func counts(t testing.TB, s *idem.Store, key string) [3]int64 {
	t.Helper()
	rec, err := s.Get(bg, "", key)
	require.NoError(t, err)
	return [3]int64{rec.Replays, rec.Conflicts, rec.Mismatches}
}

// A record's counts follow its life on Badger, where they are kept beside
// the record: they add up over flushes and reopens, show in Get and Scan,
// carry over when a released record is claimed again, start afresh in a
// new life, and go with the record when it is reclaimed.
func TestBadger_Tallies_FollowTheRecord(t *testing.T) {
	dir := t.TempDir()
	clk := idemtest.NewClock(time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC))
	o := &idem.Options{Clock: clk, Retention: time.Hour, Lease: time.Minute}
	s := openStore(t, dir, o)
	replay := func(key string) {
		t.Helper()
		_, res, err := s.Begin(bg, idem.Request{Key: key, Fingerprint: "fp"})
		require.NoError(t, err)
		require.NotNil(t, res)
	}
	sweep := func() {
		t.Helper()
		_, err := s.Sweep(bg)
		require.NoError(t, err)
	}

	_, _, err := s.Do(bg, idem.Request{Key: "done", Fingerprint: "fp"}, ok("x"))
	require.NoError(t, err)
	for range 3 {
		replay("done")
	}
	_, _, err = s.Begin(bg, idem.Request{Key: "done", Fingerprint: "other"})
	require.ErrorIs(t, err, idem.ErrMismatch)
	sweep()
	require.Equal(t, [3]int64{3, 0, 1}, counts(t, s, "done"))
	clk.Advance(time.Second)
	last := clk.Now()
	replay("done")
	replay("done")
	sweep()
	require.Equal(t, [3]int64{5, 0, 1}, counts(t, s, "done"))
	rec, err := s.Get(bg, "", "done")
	require.NoError(t, err)
	require.True(t, rec.LastReplay.Equal(last), "last replay %v, want %v", rec.LastReplay, last)

	// Counts survive a reopen, and go on adding up after it.
	require.NoError(t, s.Close())
	s = openStore(t, dir, o)
	replay("done")
	require.NoError(t, s.Close()) // Close flushes
	s = openStore(t, dir, o)
	require.Equal(t, [3]int64{6, 0, 1}, counts(t, s, "done"))
	var scanned *backend.Record
	require.NoError(t, s.Backend().(backend.Lister).Scan(bg, func(r *backend.Record) bool {
		if r.Key == "done" {
			scanned = r
		}
		return true
	}))
	require.NotNil(t, scanned)
	require.Equal(t, int64(6), scanned.Replays)

	// A conflict counted while the claim was open and flushed after its
	// release is added into the released record, and carried into the
	// next claim of it: the record's life goes on.
	c, _, err := s.Begin(bg, idem.Request{Key: "released", Fingerprint: "fp"})
	require.NoError(t, err)
	_, _, err = s.Begin(bg, idem.Request{Key: "released", Fingerprint: "fp"})
	require.ErrorIs(t, err, idem.ErrInProgress)
	require.NoError(t, c.Release(bg, "test"))
	sweep()
	require.Equal(t, [3]int64{0, 1, 0}, counts(t, s, "released"))
	c, _, err = s.Begin(bg, idem.Request{Key: "released", Fingerprint: "fp"})
	require.NoError(t, err)
	require.NotNil(t, c)
	require.Equal(t, [3]int64{0, 1, 0}, counts(t, s, "released"))
	require.NoError(t, c.Complete(bg, backend.Result{Status: 200}))
	replay("released")
	sweep()
	require.Equal(t, [3]int64{1, 1, 0}, counts(t, s, "released"))

	// An expired record's counts do not pass to the key's next life.
	clk.Advance(2 * time.Hour)
	c, _, err = s.Begin(bg, idem.Request{Key: "done", Fingerprint: "fp"})
	require.NoError(t, err)
	require.NotNil(t, c, "an expired record is claimed again")
	require.Equal(t, [3]int64{0, 0, 0}, counts(t, s, "done"))
	require.NoError(t, c.Complete(bg, backend.Result{Status: 200}))
	replay("done")
	sweep()
	require.Equal(t, [3]int64{1, 0, 0}, counts(t, s, "done"))

	// Reclaimed records leave no counts behind.
	require.Positive(t, countKeys(t, s, 'u'))
	clk.Advance(2 * time.Hour)
	sweep()
	require.Zero(t, countKeys(t, s, 'r'), "records left")
	require.Zero(t, countKeys(t, s, 'u'), "counts left")
}

// A flush of many records' counts, more than one Badger transaction
// holds, is written in several and loses none.
func TestBadger_AddTallies_ManyRecords(t *testing.T) {
	b, err := badgerstore.Open("", badgerstore.Options{InMemory: true})
	require.NoError(t, err)
	defer b.Close()
	const n = 20_000
	now := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	keys := make([]string, n)
	for i := range keys {
		keys[i] = strconv.Itoa(i)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < n; i += 16 {
				rec, _, err := b.Claim(bg, "", keys[i], backend.ClaimArgs{Now: now, LeaseEnds: now.Add(time.Minute)})
				if err == nil {
					err = b.Complete(bg, "", keys[i], rec.Token, backend.Completion{
						Result: backend.Result{Status: 200, Body: make([]byte, 100)}, At: now, ExpiresAt: now.Add(time.Hour)})
				}
				if err != nil {
					select {
					case errs <- err:
					default:
					}
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	tallies := make([]backend.Tally, 0, 2*n)
	for round := range 2 {
		tallies = tallies[:0]
		for _, k := range keys {
			tallies = append(tallies, backend.Tally{Key: k, Replays: 1, LastReplay: now.Add(time.Duration(round))},
				backend.Tally{Key: k, Mismatches: 1, LastRejection: now})
		}
		require.NoError(t, b.AddTallies(context.Background(), tallies))
	}
	for _, k := range keys {
		rec, err := b.Get(bg, "", k)
		require.NoError(t, err)
		require.Equal(t, [3]int64{2, 0, 2}, [3]int64{rec.Replays, rec.Conflicts, rec.Mismatches}, "key %s", k)
		require.True(t, rec.LastReplay.Equal(now.Add(1)), "key %s", k)
		require.True(t, rec.LastRejection.Equal(now), "key %s", k)
	}
}

// Replays of more keys than one Badger transaction holds are still
// counted: the counts are handed over in ops sized to fit, not in one
// write that Badger refuses as too big.
func TestStore_Sweep_CountsReplaysOfManyKeys(t *testing.T) {
	s := openStore(t, t.TempDir(), &idem.Options{Durability: backend.Fast})
	const keys = 4000
	for i := range keys {
		_, _, err := s.Do(bg, idem.Request{Key: "k" + strconv.Itoa(i)}, ok(`{"refund":"re_123","status":"succeeded"}`))
		require.NoError(t, err)
	}
	for i := range keys {
		_, res, err := s.Begin(bg, idem.Request{Key: "k" + strconv.Itoa(i)})
		require.NoError(t, err)
		require.NotNil(t, res)
	}
	_, err := s.Sweep(bg)
	require.NoError(t, err)
	for _, i := range []int{0, keys / 2, keys - 1} {
		rec, err := s.Get(bg, "", "k"+strconv.Itoa(i))
		require.NoError(t, err)
		require.Equal(t, int64(1), rec.Replays, rec.Key)
	}
}

// layout1Counts is a counts entry of key layout 1 (and of layout 2: the
// value's encoding did not change): version 1, then the varints of
// replays, conflicts, mismatches and the last replay's and rejection's
// Unix nanoseconds.
func layout1Counts(replays, conflicts, mismatches int64, lastReplay time.Time) []byte {
	v := []byte{1}
	for _, n := range []int64{replays, conflicts, mismatches, lastReplay.UnixNano(), 0} {
		v = binary.AppendVarint(v, n)
	}
	return v
}

// A store of key layout 1 kept one counts entry per record, t + id, which
// a flush read before writing. Open moves them: a done record's to an
// entry of layout 2 beside it, a released record's into the record, an
// orphan's nowhere; then it records layout 2, and the counts read as
// before, and go on adding up.
func TestBadger_Counts_MigrateFromLayout1(t *testing.T) {
	dir := t.TempDir()
	clk := idemtest.NewClock(time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC))
	o := &idem.Options{Clock: clk, Retention: time.Hour, Lease: time.Minute}
	s := openStore(t, dir, o)
	_, _, err := s.Do(bg, idem.Request{Key: "done", Fingerprint: "fp"}, ok("x"))
	require.NoError(t, err)
	c, _, err := s.Begin(bg, idem.Request{Key: "released", Fingerprint: "fp"})
	require.NoError(t, err)
	require.NoError(t, c.Release(bg, "test"))
	// Make the store one of layout 1, as an earlier release left it.
	b := s.Backend().(*badgerstore.Backend)
	require.NoError(t, b.Scan(bg, func(*backend.Record) bool { return false })) // Badger holds every write
	last := clk.Now()
	err = badgerstore.BadgerDB(b).Update(func(txn *badger.Txn) error {
		for _, e := range []struct {
			key string
			v   []byte
		}{
			{"done", layout1Counts(7, 0, 2, last)},
			{"released", layout1Counts(0, 3, 1, time.Time{})},
			{"gone", layout1Counts(5, 0, 0, last)},
		} {
			id := append([]byte{'t', 0}, e.key...)
			if err := txn.SetEntry(badger.NewEntry(id, e.v).WithTTL(24 * time.Hour)); err != nil {
				return err
			}
		}
		return txn.Delete([]byte("s/layout"))
	})
	require.NoError(t, err)
	require.NoError(t, s.Close())

	s = openStore(t, dir, o)
	require.Zero(t, countKeys(t, s, 't'), "layout 1's counts left")
	require.Equal(t, [3]int64{7, 0, 2}, counts(t, s, "done"))
	rec, err := s.Get(bg, "", "done")
	require.NoError(t, err)
	require.True(t, rec.LastReplay.Equal(last))
	require.Equal(t, [3]int64{0, 3, 1}, counts(t, s, "released"))
	_, err = s.Get(bg, "", "gone")
	require.ErrorIs(t, err, idem.ErrNotFound)
	err = badgerstore.BadgerDB(s.Backend().(*badgerstore.Backend)).View(func(txn *badger.Txn) error {
		item, err := txn.Get([]byte("s/layout"))
		if err != nil {
			return err
		}
		v, err := item.ValueCopy(nil)
		require.Equal(t, []byte{2}, v)
		return err
	})
	require.NoError(t, err)

	// The counts go on adding up; the released record's go on with its
	// next claim.
	_, res, err := s.Begin(bg, idem.Request{Key: "done", Fingerprint: "fp"})
	require.NoError(t, err)
	require.NotNil(t, res)
	c, _, err = s.Begin(bg, idem.Request{Key: "released", Fingerprint: "fp"})
	require.NoError(t, err)
	require.NotNil(t, c)
	_, err = s.Sweep(bg)
	require.NoError(t, err)
	require.Equal(t, [3]int64{8, 0, 2}, counts(t, s, "done"))
	require.Equal(t, [3]int64{0, 3, 1}, counts(t, s, "released"))
	require.NoError(t, c.Complete(bg, backend.Result{Status: 200}))
	require.NoError(t, s.Close())
}

// A store of a key layout newer than this release knows is refused, never
// misread.
func TestBadger_Counts_NewerLayoutRefused(t *testing.T) {
	dir := t.TempDir()
	b, err := badgerstore.Open(dir, badgerstore.Options{})
	require.NoError(t, err)
	require.NoError(t, badgerstore.BadgerDB(b).Update(func(txn *badger.Txn) error {
		return txn.Set([]byte("s/layout"), []byte{3})
	}))
	require.NoError(t, b.Close())
	_, err = badgerstore.Open(dir, badgerstore.Options{})
	require.ErrorIs(t, err, backend.ErrCorrupt)
	require.ErrorContains(t, err, "key layout 3")
}

// Each flush adds an entry beside each record it counts; Maintain folds
// the entries of a record that has gathered several into one, dropping
// those of an earlier life, and the counts read the same before and after.
func TestBadger_Counts_Fold(t *testing.T) {
	clk := idemtest.NewClock(time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC))
	s := openStore(t, t.TempDir(), &idem.Options{Clock: clk, Retention: time.Hour})
	b := s.Backend().(*badgerstore.Backend)
	for _, k := range []string{"a", "b"} {
		_, _, err := s.Do(bg, idem.Request{Key: k, Fingerprint: "fp"}, ok("x"))
		require.NoError(t, err)
	}
	replaySweep := func(key string, n int) {
		t.Helper()
		for range n {
			_, res, err := s.Begin(bg, idem.Request{Key: key, Fingerprint: "fp"})
			require.NoError(t, err)
			require.NotNil(t, res)
			_, err = s.Sweep(bg) // one flush, one entry
			require.NoError(t, err)
		}
	}
	replaySweep("a", 5)
	replaySweep("b", 1)
	require.Equal(t, 6, countKeys(t, s, 'u'))
	require.NoError(t, b.Maintain(bg))
	require.Equal(t, 2, countKeys(t, s, 'u'), "one entry a record")
	require.Equal(t, [3]int64{5, 0, 0}, counts(t, s, "a"))
	require.Equal(t, [3]int64{1, 0, 0}, counts(t, s, "b"))
	// A record with fewer entries than a fold waits for keeps them.
	replaySweep("a", 2)
	require.NoError(t, b.Maintain(bg))
	require.Equal(t, 4, countKeys(t, s, 'u'))
	require.Equal(t, [3]int64{7, 0, 0}, counts(t, s, "a"))
	replaySweep("a", 1)
	require.NoError(t, b.Maintain(bg))
	require.Equal(t, 2, countKeys(t, s, 'u'))
	require.Equal(t, [3]int64{8, 0, 0}, counts(t, s, "a"))

	// A new life of "a" after its expiry: the fold drops the earlier
	// life's entry once the new life has some.
	clk.Advance(2 * time.Hour)
	_, _, err := s.Do(bg, idem.Request{Key: "a", Fingerprint: "fp"}, ok("y"))
	require.NoError(t, err)
	require.Equal(t, [3]int64{0, 0, 0}, counts(t, s, "a"))
	replaySweep("a", 3)
	require.NoError(t, b.Maintain(bg))
	require.Equal(t, [3]int64{3, 0, 0}, counts(t, s, "a"))
	require.LessOrEqual(t, countKeys(t, s, 'u'), 2, "a's earlier life's entry is gone")
}
