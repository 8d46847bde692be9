package badgerstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/badgerstore"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/badger"
	"github.com/idemkit/idem/internal/badger/options"
	"github.com/stretchr/testify/require"
)

var bg = context.Background()

// openStore opens a Badger store in dir with a fake clock and no
// background sweep, closing it when the test ends.
func openStore(t testing.TB, dir string, o *idem.Options) *idem.Store {
	t.Helper()
	return openStoreWith(t, dir, o, badgerstore.Options{})
}

// openStoreWith is openStore on an embedded backend tuned by bo.
func openStoreWith(t testing.TB, dir string, o *idem.Options, bo badgerstore.Options) *idem.Store {
	t.Helper()
	return idemtest.NewStore(t, dir, o, bo)
}

func ok(body string) func(context.Context) (backend.Result, error) {
	return func(context.Context) (backend.Result, error) {
		return backend.Result{Status: 200, Body: []byte(body)}, nil
	}
}

func TestBadger_Reopen_KeepsResultsAndNeverRepeatsTokens(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, nil)
	tokens := map[uint64]bool{}
	for _, k := range []string{"a", "b", "c"} {
		c, _, err := s.Begin(bg, idem.Request{Key: k})
		require.NoError(t, err)
		tokens[c.Token()] = true
		require.NoError(t, c.Complete(bg, backend.Result{Status: 201, Body: []byte(k)}))
	}
	require.NoError(t, s.Close())

	s = openStore(t, dir, nil)
	for _, k := range []string{"a", "b", "c"} {
		res, replayed, err := s.Do(bg, idem.Request{Key: k}, ok("again"))
		require.NoError(t, err)
		require.True(t, replayed)
		require.Equal(t, k, string(res.Body))
	}
	for _, k := range []string{"d", "e"} {
		c, _, err := s.Begin(bg, idem.Request{Key: k})
		require.NoError(t, err)
		require.False(t, tokens[c.Token()], "token %d was handed out before the restart", c.Token())
		require.NoError(t, c.Release(bg, "test"))
	}
}

// A store whose tables were written with other table options (Snappy on
// 4 KiB blocks, the defaults before zstd) reads with the current ones,
// before and after compaction merges its tables into new ones.
func TestBadger_Reopen_ReadsTablesOfEarlierOptions(t *testing.T) {
	dir := t.TempDir()
	keys := make([]string, 400)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%03d", i)
	}
	fill := func(s *idem.Store, keys []string) {
		t.Helper()
		for _, k := range keys {
			_, _, err := s.Do(bg, idem.Request{Key: k}, ok(k))
			require.NoError(t, err)
		}
	}
	replay := func(s *idem.Store, keys []string) {
		t.Helper()
		for _, k := range keys {
			rec, err := s.Get(bg, "", k)
			require.NoError(t, err)
			require.Equal(t, k, string(rec.Result.Body))
		}
	}
	earlier := func(bo *badger.Options) {
		bo.Compression, bo.BlockSize = options.Snappy, 4<<10
		bo.BaseTableSize, bo.TableSizeMultiplier = 2<<20, 2
	}
	s := openStoreWith(t, dir, &idem.Options{}, badgerstore.TuneBadger(badgerstore.Options{}, earlier))
	fill(s, keys[:200])
	require.NoError(t, s.Close()) // flushes the memtable into a Snappy table

	// Today's options, with room in level 0 for the new store's tables
	// (the mark's, the Snappy one) and this one: no compaction merges them
	// before the check below.
	s = openStoreWith(t, dir, &idem.Options{}, badgerstore.TuneBadger(badgerstore.Options{}, func(bo *badger.Options) {
		bo.NumLevelZeroTables, bo.NumLevelZeroTablesStall = 10, 20
	}))
	replay(s, keys[:200])
	fill(s, keys[200:])
	require.NoError(t, s.Close()) // and a table of today's options beside it

	// Two tables in level 0 over a limit of one (and a third holding the
	// mark, which the second open's checkpoint flushed): Flatten merges
	// them (and no background compaction does it first).
	s = openStoreWith(t, dir, &idem.Options{}, badgerstore.TuneBadger(badgerstore.Options{}, func(bo *badger.Options) {
		bo.NumLevelZeroTables, bo.NumCompactors = 1, 0
	}))
	db := badgerstore.BadgerDB(s.Backend().(*badgerstore.Backend))
	before := db.Tables()
	require.GreaterOrEqual(t, len(before), 2)
	require.NoError(t, db.Flatten(1))
	require.NotEqual(t, before, db.Tables(), "compaction rewrote no table")
	replay(s, keys)
}

func TestBadger_Open_LockedDirectory(t *testing.T) {
	dir := t.TempDir()
	openStore(t, dir, nil)
	_, err := idem.Open(dir, nil)
	require.ErrorIs(t, err, backend.ErrUnavailable, "a second process must be refused, not share the directory")
}

func TestBadger_Open_ReadOnly(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, nil)
	_, _, err := s.Do(bg, idem.Request{Key: "k"}, ok("saved"))
	require.NoError(t, err)
	require.NoError(t, s.Close())

	ro := openStoreWith(t, dir, &idem.Options{}, badgerstore.Options{ReadOnly: true})
	rec, err := ro.Get(bg, "", "k")
	require.NoError(t, err)
	require.Equal(t, "saved", string(rec.Result.Body))
	_, _, err = ro.Begin(bg, idem.Request{Key: "new"})
	require.ErrorIs(t, err, backend.ErrUnavailable)
	_, err = ro.Sweep(bg)
	require.ErrorIs(t, err, backend.ErrUnavailable)
}

func TestBadger_Open_NotADirectory(t *testing.T) {
	f := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(f, []byte("x"), 0o600))
	_, err := idem.Open(f, nil)
	require.ErrorIs(t, err, backend.ErrUnavailable)
}

func TestBadger_CorruptRecord(t *testing.T) {
	b, err := badgerstore.Open(t.TempDir(), badgerstore.Options{})
	require.NoError(t, err)
	s := idem.New(b, &idem.Options{SweepInterval: -1})
	t.Cleanup(func() { _ = s.Close() })
	// Write garbage where the record of ("", "bad") lives: r, scope length 0, key.
	require.NoError(t, badgerstore.BadgerDB(b).Update(func(txn *badger.Txn) error {
		return txn.Set([]byte("r\x00bad"), []byte{0xc1, 0xff, 0x00})
	}))
	ran := false
	_, _, err = s.Do(bg, idem.Request{Key: "bad"}, func(context.Context) (backend.Result, error) {
		ran = true
		return backend.Result{}, nil
	})
	require.ErrorIs(t, err, backend.ErrCorrupt)
	require.False(t, ran, "an effect ran over a record that could not be read")
	_, err = s.Get(bg, "", "bad")
	require.ErrorIs(t, err, backend.ErrCorrupt)
	// Other keys are unaffected, and a sweep is not stuck on it.
	_, _, err = s.Do(bg, idem.Request{Key: "good"}, ok("x"))
	require.NoError(t, err)
	_, err = s.Sweep(bg)
	require.NoError(t, err)
}

func TestStore_BackgroundSweep_RecoversWithInjectedClock(t *testing.T) {
	clk := idemtest.NewClock(time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC))
	recovered := make(chan idem.Event, 16)
	s := openStore(t, t.TempDir(), &idem.Options{
		Clock: clk, SweepInterval: time.Minute, Lease: 10 * time.Second,
		Resolver: idem.ResolverFunc(func(context.Context, *backend.Record) (idem.Resolution, error) {
			return idem.Resolution{Verdict: idem.VerdictCommitted, Result: backend.Result{Status: 200, Body: []byte("ledger")}}, nil
		}),
		Observer: idem.ObserverFunc(func(e idem.Event) {
			if e.Kind == idem.EventRecovered {
				recovered <- e
			}
		}),
	})
	_, _, err := s.Begin(bg, idem.Request{Key: "orphan"})
	require.NoError(t, err)
	clk.BlockUntil(1) // the background sweep waits for its next turn
	clk.Advance(time.Minute)
	select {
	case e := <-recovered:
		require.Equal(t, "orphan", e.Key)
		require.Equal(t, "committed", e.Verdict)
	case <-time.After(30 * time.Second):
		t.Fatal("the background sweep did not recover the stale claim")
	}
	rec, err := s.Get(bg, "", "orphan")
	require.NoError(t, err)
	require.Equal(t, backend.StateDone, rec.State)
}

func TestStore_Close_WhileRequestsInFlight(t *testing.T) {
	s := openStore(t, t.TempDir(), &idem.Options{CloseTimeout: time.Second})
	done := make(chan struct{})
	for g := range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := 0; ; i++ {
				_, _, err := s.Do(bg, idem.Request{Key: idemKey(g, i)}, ok("x"))
				if errors.Is(err, backend.ErrClosed) {
					return
				}
				if err != nil && !errors.Is(err, backend.ErrClosed) {
					t.Errorf("unexpected error: %v", err)
					return
				}
			}
		}()
	}
	require.NoError(t, s.Close(), "Close under load must neither fail nor panic")
	for range 8 {
		<-done
	}
}

func idemKey(g, i int) string { return string(rune('a'+g)) + "-" + time.Duration(i).String() }

// A replay of a key kept in memory allocates nothing, counted or not,
// observed or not (a no-op observer).
func TestBadger_Replay_AllocatesNothing(t *testing.T) {
	for _, o := range []*idem.Options{{}, {Observer: idem.ObserverFunc(func(idem.Event) {})}} {
		s := openStore(t, t.TempDir(), o)
		req := idem.Request{Scope: "tenant", Key: "k", Fingerprint: "fp"}
		_, _, err := s.Do(bg, req, ok("x"))
		require.NoError(t, err)
		allocs := testing.AllocsPerRun(1000, func() {
			_, res, err := s.Begin(bg, req)
			if err != nil || res == nil || string(res.Body) != "x" {
				t.Fatalf("replay: %v, %v", res, err)
			}
		})
		require.Zero(t, allocs)
		_, err = s.Sweep(bg)
		require.NoError(t, err)
		rec, err := s.Get(bg, "tenant", "k")
		require.NoError(t, err)
		require.Equal(t, int64(1001), rec.Replays) // AllocsPerRun runs once more to warm up
	}
}

// With a Clock other than the system clock, every replay reads it: a
// record replays until the nanosecond it expires, and at that one runs
// again, however far from its expiry it was when the set last saw it.
func TestBadger_Replay_InjectedClockIsExact(t *testing.T) {
	clk := idemtest.NewClock(time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC))
	s := openStore(t, t.TempDir(), &idem.Options{Clock: clk, Retention: time.Hour})
	req := idem.Request{Key: "k", Fingerprint: "fp"}
	_, _, err := s.Do(bg, req, ok("x"))
	require.NoError(t, err)
	_, res, err := s.Begin(bg, req)
	require.NoError(t, err)
	require.NotNil(t, res)
	clk.Advance(time.Hour - 1)
	_, res, err = s.Begin(bg, req)
	require.NoError(t, err)
	require.NotNil(t, res, "not replayed a nanosecond before expiry")
	clk.Advance(1)
	c, res, err := s.Begin(bg, req)
	require.NoError(t, err)
	require.Nil(t, res, "replayed at expiry")
	require.NotNil(t, c)
}
