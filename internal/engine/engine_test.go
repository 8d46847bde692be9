package engine

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/internal/badger"
	"github.com/stretchr/testify/require"
)

func openEngine(t *testing.T, dir string, o Options) *Engine {
	t.Helper()
	o.Badger = badger.DefaultOptions(dir).WithLogger(nil).WithMemTableSize(4 << 20).WithValueThreshold(16 << 10).
		WithReadOnly(o.Badger.ReadOnly)
	e, err := Open(o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// read returns the value of key as a reader outside the committer sees it.
func read(t *testing.T, e *Engine, key string) (string, bool) {
	t.Helper()
	var v string
	ok, err := e.Read(nil, []byte(key), func(val []byte, _ uint64) error {
		v = string(val)
		return nil
	})
	require.NoError(t, err)
	return v, ok
}

func put(t *testing.T, e *Engine, key, val string) {
	t.Helper()
	require.NoError(t, e.Update(func(tx *Txn) error {
		tx.Set([]byte(key), []byte(val), 0)
		return nil
	}))
}

// forget deletes keys from Badger behind the log's back, as a power loss
// would.
func forget(t *testing.T, e *Engine, keys ...string) {
	t.Helper()
	require.NoError(t, e.DB().Update(func(txn *badger.Txn) error {
		for _, k := range keys {
			if err := txn.Delete([]byte(k)); err != nil {
				return err
			}
		}
		return nil
	}))
}

// TestUpdate_OpsSeeEveryEarlierWrite increments counters from many
// goroutines, each increment a read and a write in one op: the units
// overlap in the pipeline, so most reads are answered by the pending
// writes, and no increment may be lost.
func TestUpdate_OpsSeeEveryEarlierWrite(t *testing.T) {
	for _, durable := range []bool{true, false} {
		t.Run(map[bool]string{true: "durable", false: "fast"}[durable], func(t *testing.T) {
			dir := t.TempDir()
			e := openEngine(t, dir, Options{Durable: durable})
			keys := [][]byte{[]byte("a"), []byte("b"), []byte("c")}
			var wg sync.WaitGroup
			for g := range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 50 {
						key := keys[(g+i)%len(keys)]
						err := e.Update(func(tx *Txn) error {
							var n uint64
							if _, err := tx.Read(key, func(v []byte, _ uint64) error {
								n = binary.BigEndian.Uint64(v)
								return nil
							}); err != nil {
								return err
							}
							tx.Set(key, binary.BigEndian.AppendUint64(nil, n+1), 0)
							return nil
						})
						if err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			total := uint64(0)
			for _, k := range keys {
				v, ok := read(t, e, string(k))
				require.True(t, ok)
				total += binary.BigEndian.Uint64([]byte(v))
			}
			require.Equal(t, uint64(16*50), total)
		})
	}
}

func TestUpdate_FailedOrEmptyOpWritesNothing(t *testing.T) {
	e := openEngine(t, t.TempDir(), Options{Durable: true})
	boom := errors.New("boom")
	err := e.Update(func(tx *Txn) error {
		tx.Set([]byte("k"), []byte("v"), 0)
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.NoError(t, e.Update(func(tx *Txn) error {
		tx.Set([]byte("k"), []byte("v"), 0)
		return ErrNoWrite
	}))
	_, ok := read(t, e, "k")
	require.False(t, ok, "neither op may write")

	ran := false
	require.NoError(t, e.Update(func(tx *Txn) error {
		tx.Set([]byte("k"), []byte("v"), 0)
		tx.Delete([]byte("k"))
		tx.OnCommit(func() { ran = true })
		return nil
	}))
	require.True(t, ran, "OnCommit runs before the op is answered")
	_, ok = read(t, e, "k")
	require.False(t, ok, "the later write of an op wins")
}

// TestRead_SeesTheDurableWriteWhileALaterOneIsPending holds a unit
// between its log sync and its Badger commit, and the next unit of the
// same key before its log sync: a reader must find the first (durable,
// answered) and not the second (not yet durable), although the pending
// index's latest write of the key is the second's.
func TestRead_SeesTheDurableWriteWhileALaterOneIsPending(t *testing.T) {
	var holdLog, holdApply atomic.Bool
	logHeld, releaseLog := make(chan uint64, 8), make(chan struct{})
	applyHeld, releaseApply := make(chan uint64, 8), make(chan struct{})
	var release sync.Once
	releaseAll := func() {
		release.Do(func() {
			close(releaseLog)
			close(releaseApply)
		})
	}
	e := openEngine(t, t.TempDir(), Options{Durable: true,
		BeforeLog: func(seq uint64) {
			if holdLog.Load() {
				logHeld <- seq
				<-releaseLog
			}
		},
		BeforeApply: func(seq uint64) {
			if holdApply.Load() {
				applyHeld <- seq
				<-releaseApply
			}
		}})
	t.Cleanup(releaseAll) // a failed check must not leave Close waiting

	holdApply.Store(true)
	put(t, e, "k", "first")
	e.wakeApplier() // a lone unit waits for the applier's next wake-up
	<-applyHeld     // answered, and Badger does not hold it
	holdLog.Store(true)
	second := make(chan error, 1)
	go func() {
		second <- e.Update(func(tx *Txn) error {
			tx.Set([]byte("k"), []byte("second"), 0)
			return nil
		})
	}()
	<-logHeld // sealed into the pending index, not yet durable

	v, ok := read(t, e, "k")
	require.True(t, ok, "the first write was answered: a reader must find it")
	require.Equal(t, "first", v)

	holdLog.Store(false)
	holdApply.Store(false)
	releaseAll()
	require.NoError(t, <-second)
	v, _ = read(t, e, "k")
	require.Equal(t, "second", v)
}

// TestRead_ResidentComesAfterPendingAndBeforeBadger checks the order of
// Read's layers. Resident here disagrees with the writes on purpose, to
// tell the layers apart.
func TestRead_ResidentComesAfterPendingAndBeforeBadger(t *testing.T) {
	var resident sync.Map
	var hold atomic.Bool
	held, release := make(chan struct{}, 1), make(chan struct{})
	e := openEngine(t, t.TempDir(), Options{Durable: true,
		Resident: func(key []byte) []byte {
			if v, ok := resident.Load(string(key)); ok {
				return v.([]byte)
			}
			return nil
		},
		BeforeApply: func(uint64) {
			if hold.Load() {
				held <- struct{}{}
				<-release
			}
		}})
	put(t, e, "k", "stored")
	require.NoError(t, e.View(func(*badger.Txn) error { return nil })) // nothing pending
	resident.Store("k", []byte("resident"))
	v, _ := read(t, e, "k")
	require.Equal(t, "resident", v, "Resident answers before Badger")

	hold.Store(true)
	put(t, e, "k", "pending")
	e.wakeApplier() // a lone unit waits for the applier's next wake-up
	<-held          // durable, and not in Badger
	v, _ = read(t, e, "k")
	require.Equal(t, "pending", v, "a durable pending write answers before Resident")
	hold.Store(false)
	close(release)
}

func TestEngine_ReplayRestoresWhatBadgerLost(t *testing.T) {
	for _, buffered := range []bool{false, true} {
		t.Run(map[bool]string{false: "direct", true: "buffered"}[buffered], func(t *testing.T) {
			dir := t.TempDir()
			o := Options{Durable: true, BufferedLog: buffered}
			e := openEngine(t, dir, o)
			if buffered {
				require.False(t, e.Log().Direct())
			}
			put(t, e, "k1", "one")
			put(t, e, "k2", "two")
			log, err := os.ReadFile(filepath.Join(dir, LogName))
			require.NoError(t, err)
			forget(t, e, "k1", "k2")
			require.NoError(t, e.Close())
			require.NoError(t, os.WriteFile(filepath.Join(dir, LogName), log, 0o600))

			_, err = Open(Options{Badger: badger.DefaultOptions(dir).WithLogger(nil).WithValueThreshold(16 << 10).WithReadOnly(true)})
			require.ErrorIs(t, err, ErrUnapplied, "a read-only open cannot apply the log")

			e = openEngine(t, dir, o)
			v, _ := read(t, e, "k1")
			require.Equal(t, "one", v)
			v, _ = read(t, e, "k2")
			require.Equal(t, "two", v)
			// The replay ended with a checkpoint: a second crash replays
			// nothing over later writes.
			forget(t, e, "k1")
			require.NoError(t, e.Close())
			e = openEngine(t, dir, o)
			_, ok := read(t, e, "k1")
			require.False(t, ok)
		})
	}
}

func TestEngine_FailedLogWriteStopsWritesUntilReopen(t *testing.T) {
	dir := t.TempDir()
	e := openEngine(t, dir, Options{Durable: true})
	put(t, e, "k1", "one")
	require.NoError(t, e.Log().Close()) // every later write fails
	err := e.Update(func(tx *Txn) error {
		tx.Set([]byte("k2"), []byte("two"), 0)
		return nil
	})
	require.Error(t, err)
	_, ok := read(t, e, "k2")
	require.False(t, ok, "a write whose frame failed must not be visible")
	err = e.Update(func(tx *Txn) error { return nil })
	require.ErrorContains(t, err, "reopen", "writes stay refused")
	v, _ := read(t, e, "k1")
	require.Equal(t, "one", v, "reads go on")
	_ = e.Close()

	e = openEngine(t, dir, Options{Durable: true})
	v, _ = read(t, e, "k1")
	require.Equal(t, "one", v)
	put(t, e, "k3", "three")
}

// TestUpdate_TooBigBesideOthers gives an op a transaction of its own when
// its writes do not fit beside those of the ops before it.
func TestUpdate_TooBigBesideOthers(t *testing.T) {
	e := openEngine(t, t.TempDir(), Options{Durable: true})
	size, _ := e.MaxBatch()
	big := make([]byte, size*2/3)
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = e.Update(func(tx *Txn) error {
				tx.Set([]byte{byte('a' + i)}, big, 0)
				return nil
			})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err)
		v, ok := read(t, e, string(rune('a'+i)))
		require.True(t, ok)
		require.Len(t, v, len(big))
	}
}

func TestEngine_DiskUsageCountsTheLog(t *testing.T) {
	e := openEngine(t, t.TempDir(), Options{Durable: true})
	put(t, e, "k", "v")
	u, err := e.DiskUsage()
	require.NoError(t, err)
	require.Positive(t, u.Log)
	require.GreaterOrEqual(t, u.Total, u.Log+u.Tables+u.ValueLog)
}

func TestUpdate_AfterCloseOrReadOnly(t *testing.T) {
	dir := t.TempDir()
	e := openEngine(t, dir, Options{Durable: true})
	require.NoError(t, e.Close())
	require.ErrorIs(t, e.Update(func(*Txn) error { return nil }), ErrClosed)
	ro := openEngine(t, dir, Options{Badger: badger.Options{ReadOnly: true}})
	require.ErrorIs(t, ro.Update(func(*Txn) error { return nil }), ErrReadOnly)
}

// TestOpen_LockComesFirst opens a directory a live engine holds: the
// second open fails with ErrLocked and touches nothing, not even a
// zero-byte log file the live engine may have just created.
func TestOpen_LockComesFirst(t *testing.T) {
	dir := t.TempDir()
	e := openEngine(t, dir, Options{Durable: true})
	put(t, e, "k", "v")
	empty := filepath.Join(dir, "000099.vlog")
	require.NoError(t, os.WriteFile(empty, nil, 0o600))

	for _, ro := range []bool{false, true} {
		o := Options{Durable: true, Badger: badger.DefaultOptions(dir).WithLogger(nil).WithReadOnly(ro)}
		_, err := Open(o)
		require.ErrorIs(t, err, ErrLocked, "read-only %v", ro)
		_, err = os.Stat(empty)
		require.NoError(t, err, "the refused open deleted a file of the live one")
	}
	v, ok := read(t, e, "k")
	require.True(t, ok)
	require.Equal(t, "v", v)

	// Once the first is closed, the lock is free again.
	require.NoError(t, os.Remove(empty))
	require.NoError(t, e.Close())
	e2 := openEngine(t, dir, Options{Durable: true})
	v, ok = read(t, e2, "k")
	require.True(t, ok)
	require.Equal(t, "v", v)
}
