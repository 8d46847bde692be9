package idem_test

// Tests of the counting rule (docs/contract.md, "Counts"): a count is
// never more than the replays answered; it is exact after a clean close and
// after a flush with nothing lost; a crash, or a full table of pending
// counts, leaves it short and marked approximate, for the records whose
// life the loss touched and no others.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/badgerstore"
	"github.com/idemkit/idem/idemtest"
	"github.com/stretchr/testify/require"
)

// doOnce runs an effect for key in s, saving body.
func doOnce(t testing.TB, s *idem.Store, key string, body []byte) {
	t.Helper()
	_, replayed, err := s.Do(bg, idem.Request{Key: key, Fingerprint: "fp"},
		func(context.Context) (idem.Result, error) { return idem.Result{Status: 200, Body: body}, nil })
	require.NoError(t, err)
	require.False(t, replayed)
}

// replayN replays key in s n times.
func replayN(t testing.TB, s *idem.Store, key string, n int) {
	t.Helper()
	for range n {
		c, res, err := s.Begin(bg, idem.Request{Key: key, Fingerprint: "fp"})
		require.NoError(t, err)
		require.Nil(t, c)
		require.NotNil(t, res)
	}
}

func counted(t testing.TB, s *idem.Store, key string) (int64, bool) {
	t.Helper()
	rec, err := s.Get(bg, "", key)
	require.NoError(t, err)
	return rec.Replays, s.CountsApproximate(rec)
}

// TestStore_Counts_ExactAfterCleanClose: replays from the replay cache and
// from the disk (after a reopen empties the cache) are all counted, and
// exactly, once Close has written them.
func TestStore_Counts_ExactAfterCleanClose(t *testing.T) {
	dir := t.TempDir()
	clk := idemtest.NewClock(time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC))
	o := &idem.Options{Clock: clk}
	s, err := idemtest.OpenBadger(dir, o, badgerstore.Options{})
	require.NoError(t, err)
	doOnce(t, s, "a", []byte("x"))
	replayN(t, s, "a", 3)
	require.NoError(t, s.Close())

	s, err = idemtest.OpenBadger(dir, o, badgerstore.Options{})
	require.NoError(t, err)
	n, approx := counted(t, s, "a")
	require.Equal(t, int64(3), n)
	require.False(t, approx, "nothing was lost: the count is exact")
	clk.Advance(time.Second)
	replayN(t, s, "a", 4) // the first from the disk, the rest from the cache
	require.NoError(t, s.Close())

	s, err = idemtest.OpenBadger(dir, o, badgerstore.Options{})
	require.NoError(t, err)
	defer s.Close()
	n, approx = counted(t, s, "a")
	require.Equal(t, int64(7), n)
	require.False(t, approx)
}

// TestStore_Counts_AfterCountInterval: counts reach the record by
// themselves, within a count interval, without a Sweep or a Close.
func TestStore_Counts_AfterCountInterval(t *testing.T) {
	s := openStore(t, "", &idem.Options{CountInterval: 5 * time.Millisecond})
	doOnce(t, s, "a", []byte("x"))
	replayN(t, s, "a", 5)
	require.Eventually(t, func() bool {
		n, _ := counted(t, s, "a")
		return n == 5
	}, time.Minute, time.Millisecond, "the count interval's flush wrote the replays")
	n, approx := counted(t, s, "a")
	require.Equal(t, int64(5), n)
	require.False(t, approx)
}

// TestStore_Counts_FullTableDropsAndMarks: past the memory budget's share
// of pending counts, a replay of a record with no place is not counted (no
// early flush), and every record whose life the period touched reads as
// approximate; a record first seen after it is exact again. Results over
// the replay cache's size limit are counted in the table (not the cache),
// whose share at the smallest budget is 1,024 records.
func TestStore_Counts_FullTableDropsAndMarks(t *testing.T) {
	const table, extra = 1024, 50
	clk := idemtest.NewClock(time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC))
	// No flush but Sweep's: the table fills exactly once.
	s := openStore(t, t.TempDir(), &idem.Options{Clock: clk, MemoryBudget: 1, CountInterval: time.Hour})
	big := bytes.Repeat([]byte("b"), 20<<10)
	keys := make([]string, table+extra)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%05d", i)
		doOnce(t, s, keys[i], big)
	}
	clk.Advance(time.Minute)
	for _, k := range keys {
		replayN(t, s, k, 2)
	}
	_, err := s.Sweep(bg)
	require.NoError(t, err)
	var total int64
	for _, k := range keys {
		n, approx := counted(t, s, k)
		require.LessOrEqual(t, n, int64(2), "a count is never more than the replays answered")
		require.True(t, approx, "%s: counts were dropped while it lived", k)
		total += n
	}
	require.Equal(t, int64(2*table), total, "the table held %d records' counts; the others were dropped", table)

	// A record first seen after the period is exact.
	clk.Advance(time.Minute)
	doOnce(t, s, "later", big)
	replayN(t, s, "later", 3)
	_, err = s.Sweep(bg)
	require.NoError(t, err)
	n, approx := counted(t, s, "later")
	require.Equal(t, int64(3), n)
	require.False(t, approx)
}

// The counts crash child: it opens the store in IDEM_COUNTS_CHILD, saves
// "a", replays it 3 times, writes them (Sweep), replays it 2 times more,
// says "ready" on stdout and waits to be killed.
const countsChildEnv = "IDEM_COUNTS_CHILD"

func TestCountsCrash_Child(t *testing.T) {
	dir := os.Getenv(countsChildEnv)
	if dir == "" {
		return
	}
	s, err := idem.Open(dir, &idem.Options{CountInterval: time.Hour, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	doOnce(t, s, "a", []byte("x"))
	replayN(t, s, "a", 3)
	if _, err := s.Sweep(bg); err != nil {
		t.Fatal(err)
	}
	replayN(t, s, "a", 2)
	os.Stdout.WriteString("ready\n")
	select {}
}

// TestStore_Counts_KillShort kills a child process (SIGKILL) holding two
// replays not yet written: after the reopen the count is short by exactly
// those, and marked approximate; a record first seen after the reopen is
// exact, through a clean close.
func TestStore_Counts_KillShort(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a child process")
	}
	dir := filepath.Join(t.TempDir(), "store")
	cmd := exec.Command(os.Args[0], "-test.run=^TestCountsCrash_Child$", "-test.count=1")
	cmd.Env = append(os.Environ(), countsChildEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("the child ended before it was ready (its output is above): %v", err)
	}
	require.Equal(t, "ready\n", line)
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()

	s, err := idem.Open(dir, &idem.Options{SweepInterval: -1})
	require.NoError(t, err)
	n, approx := counted(t, s, "a")
	require.Equal(t, int64(3), n, "the replays written before the kill, not the 2 after")
	require.True(t, approx, "the kill lost counts while a lived")

	doOnce(t, s, "b", []byte("y"))
	replayN(t, s, "b", 2)
	require.NoError(t, s.Close())
	s, err = idem.Open(dir, &idem.Options{SweepInterval: -1})
	require.NoError(t, err)
	defer s.Close()
	n, approx = counted(t, s, "b")
	require.Equal(t, int64(2), n)
	require.False(t, approx, "b was first seen after the kill's gap")
	_, approx = counted(t, s, "a")
	require.True(t, approx, "the gap is kept across a clean close")
}

// noLedger is a Badger backend as an earlier release used it: a Tallier
// that keeps no count ledger.
type noLedger struct {
	backend.Backend
	t backend.Tallier
}

func (n noLedger) AddTallies(ctx context.Context, ts []backend.Tally) error {
	return n.t.AddTallies(ctx, ts)
}

// TestStore_Counts_UpgradeMarksOlderRecords: a store that has no ledger
// yet (written by a release that kept none, whose crashes went unrecorded)
// reads its older records' counts as approximate, and counts exactly from
// the open on.
func TestStore_Counts_UpgradeMarksOlderRecords(t *testing.T) {
	dir := t.TempDir()
	clk := idemtest.NewClock(time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC))
	b, err := badgerstore.Open(dir, badgerstore.Options{})
	require.NoError(t, err)
	old := idem.New(noLedger{b, b}, &idem.Options{Clock: clk, SweepInterval: -1})
	doOnce(t, old, "old", []byte("x"))
	replayN(t, old, "old", 2)
	require.NoError(t, old.Close())

	clk.Advance(time.Minute)
	s, err := idemtest.OpenBadger(dir, &idem.Options{Clock: clk}, badgerstore.Options{})
	require.NoError(t, err)
	defer s.Close()
	n, approx := counted(t, s, "old")
	require.Equal(t, int64(2), n)
	require.True(t, approx, "counted before the store kept a ledger")
	clk.Advance(time.Second)
	doOnce(t, s, "new", []byte("y"))
	replayN(t, s, "new", 2)
	_, err = s.Sweep(bg)
	require.NoError(t, err)
	n, approx = counted(t, s, "new")
	require.Equal(t, int64(2), n)
	require.False(t, approx)
}
