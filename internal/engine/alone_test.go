package engine

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/badger"
	"github.com/stretchr/testify/require"
)

// goid returns the calling goroutine's id, from its stack header
// ("goroutine 18 [running]:").
func goid() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	id, err := strconv.ParseUint(string(b[:bytes.IndexByte(b, ' ')]), 10, 64)
	if err != nil {
		panic(err)
	}
	return id
}

// loggers records which goroutine logged each unit (Options.BeforeLog),
// and can hold the next unit logged until released.
type loggers struct {
	mu      sync.Mutex
	by      []uint64 // goroutine ids, in the order units were logged
	hold    atomic.Bool
	held    chan uint64
	rel     chan struct{}
	relOnce sync.Once
}

func newLoggers() *loggers {
	return &loggers{held: make(chan uint64, 1), rel: make(chan struct{})}
}

// release lets the held unit, and any later one, be logged.
func (l *loggers) release() { l.relOnce.Do(func() { close(l.rel) }) }

// holdAlone makes the next unit wait before its log write, starts a put
// of key "lone" from a goroutine of its own (run alone, once goAlone
// returned), and returns the held unit's seq and the put's answer. The
// unit is released when the test ends, before the engine's Close (a
// cleanup registered later runs first), so that a failed check does not
// leave Close waiting.
func holdAlone(t *testing.T, e *Engine, l *loggers) (uint64, chan error) {
	t.Cleanup(l.release)
	l.hold.Store(true)
	lone := make(chan error, 1)
	go func() {
		lone <- e.Update(func(tx *Txn) error {
			tx.Set([]byte("lone"), []byte("v"), 0)
			return nil
		})
	}()
	return <-l.held, lone
}

func (l *loggers) beforeLog(seq uint64) {
	l.mu.Lock()
	l.by = append(l.by, goid())
	l.mu.Unlock()
	if l.hold.CompareAndSwap(true, false) {
		l.held <- seq
		<-l.rel
	}
}

// last returns how many units were logged, and the goroutine that logged
// the last.
func (l *loggers) last() (int, uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.by) == 0 {
		return 0, 0
	}
	return len(l.by), l.by[len(l.by)-1]
}

// goAlone runs sequential puts until one is logged on the caller's own
// goroutine, which the committer allows once lone units came in a row.
func goAlone(t *testing.T, e *Engine, l *loggers) {
	t.Helper()
	me := goid()
	for i := range 100 {
		put(t, e, fmt.Sprintf("warm-%d", i), "v")
		if _, by := l.last(); by == me {
			return
		}
	}
	t.Fatal("100 lone puts in a row, and none was logged on its caller's goroutine")
}

// TestUpdate_LoneCallerLogsItsOwnUnit checks that one caller at a time
// ends up logging its own units (no goroutine woken on its way), that once
// it does every later lone op does too, and that those writes are read
// back and durable.
func TestUpdate_LoneCallerLogsItsOwnUnit(t *testing.T) {
	dir := t.TempDir()
	l := newLoggers()
	e := openEngine(t, dir, Options{Durable: true, BeforeLog: l.beforeLog})
	me := goid()
	put(t, e, "first", "v")
	_, by := l.last()
	require.NotEqual(t, me, by, "the first unit must go through the syncer: no streak of lone units yet")

	goAlone(t, e, l)
	for i := range 20 {
		key := fmt.Sprintf("k%02d", i)
		put(t, e, key, strconv.Itoa(i))
		_, by := l.last()
		require.Equal(t, me, by, "lone op %d was logged on another goroutine", i)
		v, ok := read(t, e, key)
		require.True(t, ok)
		require.Equal(t, strconv.Itoa(i), v)
	}
	require.NoError(t, e.Close())

	e = openEngine(t, dir, Options{Durable: true})
	for i := range 20 {
		v, ok := read(t, e, fmt.Sprintf("k%02d", i))
		require.True(t, ok, "k%02d was answered: it must survive the reopen", i)
		require.Equal(t, strconv.Itoa(i), v)
	}
}

// TestUpdate_OpsArrivingDuringALoneUnitAreGrouped holds a lone caller's
// unit before its log write while eight other callers arrive: they wait
// for the committer, which takes its role back once the lone unit is
// answered and logs all eight in one unit; the next op goes through the
// committer again.
func TestUpdate_OpsArrivingDuringALoneUnitAreGrouped(t *testing.T) {
	l := newLoggers()
	e := openEngine(t, t.TempDir(), Options{Durable: true, BeforeLog: l.beforeLog})
	goAlone(t, e, l)
	heldSeq, lone := holdAlone(t, e, l)

	const n = 8
	errs := make(chan error, n)
	for i := range n {
		go func() {
			errs <- e.Update(func(tx *Txn) error {
				tx.Set(fmt.Appendf(nil, "g%d", i), []byte("v"), 0)
				return nil
			})
		}()
	}
	// The committer takes the first op and waits for its role; the other
	// seven queue behind it.
	deadline := time.Now().Add(time.Minute)
	for len(e.ops) < n-1 {
		require.True(t, time.Now().Before(deadline), "the eight ops never queued")
		runtime.Gosched()
	}
	require.Len(t, errs, 0, "no op may be answered while the lone unit holds the role")
	units, _ := l.last()

	l.release()
	require.NoError(t, <-lone)
	for range n {
		require.NoError(t, <-errs)
	}
	after, _ := l.last()
	require.Equal(t, units+1, after, "the eight ops must be logged as one unit")
	for i := range n {
		_, ok := read(t, e, fmt.Sprintf("g%d", i))
		require.True(t, ok)
	}
	require.Greater(t, e.durable.Load(), heldSeq)

	put(t, e, "next", "v")
	_, by := l.last()
	require.NotEqual(t, goid(), by, "a unit of eight ends the streak: the next op goes through the committer")
}

// TestClose_WaitsForALoneUnit closes the engine while a lone caller's unit
// waits before its log write: Close waits for it, the op succeeds, and
// its write survives the reopen.
func TestClose_WaitsForALoneUnit(t *testing.T) {
	dir := t.TempDir()
	l := newLoggers()
	e := openEngine(t, dir, Options{Durable: true, BeforeLog: l.beforeLog})
	goAlone(t, e, l)
	_, lone := holdAlone(t, e, l)
	closed := make(chan error, 1)
	go func() { closed <- e.Close() }()
	<-e.stopped // Close began
	late := make(chan error, 1)
	go func() { late <- e.Update(func(tx *Txn) error { return nil }) }()
	require.Len(t, closed, 0, "Close returned while a lone unit was in flight")

	l.release()
	require.NoError(t, <-lone)
	require.NoError(t, <-closed)
	require.ErrorIs(t, <-late, ErrClosed, "an op that came after Close began")

	e = openEngine(t, dir, Options{Durable: true})
	v, ok := read(t, e, "lone")
	require.True(t, ok, "the lone op was answered: its write must survive the reopen")
	require.Equal(t, "v", v)
}

// TestUpdate_PanicAloneBreaksTheEngine panics in an op run alone and
// recovers it up the caller's stack, as an HTTP server would: the engine
// refuses later writes until it is reopened, rather than go on with a
// half-run unit, and the reopened store holds the answered writes and
// none of the op's.
func TestUpdate_PanicAloneBreaksTheEngine(t *testing.T) {
	dir := t.TempDir()
	l := newLoggers()
	e := openEngine(t, dir, Options{Durable: true, BeforeLog: l.beforeLog})
	goAlone(t, e, l)
	put(t, e, "kept", "v")

	func() {
		defer func() { require.Equal(t, "boom", recover()) }()
		_ = e.Update(func(tx *Txn) error {
			tx.Set([]byte("half"), []byte("v"), 0)
			panic("boom")
		})
	}()
	err := e.Update(func(tx *Txn) error {
		tx.Set([]byte("after"), []byte("v"), 0)
		return nil
	})
	require.ErrorContains(t, err, "an op panicked: boom")
	v, ok := read(t, e, "kept")
	require.True(t, ok)
	require.Equal(t, "v", v)
	require.NoError(t, e.Close())

	e = openEngine(t, dir, Options{Durable: true})
	_, ok = read(t, e, "kept")
	require.True(t, ok, "an answered write must survive")
	for _, k := range []string{"half", "after"} {
		_, ok = read(t, e, k)
		require.False(t, ok, "%s was never answered", k)
	}
	put(t, e, "again", "v")
}

// TestUpdate_LoneUnitsWakeTheApplierInBatches checks the lazy hand-over of
// one-op units to the applier (handApplier): every write is found by a
// reader at once, the applier is woken once lazyUnits units wait (with no
// settle to wake it, Badger comes to hold them), and a settle leaves
// Badger holding every answered write.
func TestUpdate_LoneUnitsWakeTheApplierInBatches(t *testing.T) {
	e := openEngine(t, t.TempDir(), Options{Durable: true})
	inBadger := func(key string) bool {
		err := e.DB().View(func(txn *badger.Txn) error { _, err := txn.Get([]byte(key)); return err })
		if errors.Is(err, badger.ErrKeyNotFound) {
			return false
		}
		require.NoError(t, err)
		return true
	}
	require.NoError(t, e.View(func(*badger.Txn) error { return nil }))

	// Fewer than fill the applier's channel: only the lazy bound wakes it.
	n := 2*lazyUnits - 1
	require.Less(t, n, applyDepth)
	for i := range n {
		k := fmt.Sprintf("k%d", i)
		put(t, e, k, "v")
		v, ok := read(t, e, k)
		require.True(t, ok, "an answered write is found at once")
		require.Equal(t, "v", v)
	}
	require.Eventually(t, func() bool {
		for i := range lazyUnits {
			if !inBadger(fmt.Sprintf("k%d", i)) {
				return false
			}
		}
		return true
	}, 10*time.Second, time.Millisecond, "the %dth waiting unit wakes the applier", lazyUnits)

	require.NoError(t, e.View(func(*badger.Txn) error { return nil })) // settles
	for i := range n {
		require.True(t, inBadger(fmt.Sprintf("k%d", i)), "k%d is in Badger after a settle", i)
	}
}
