package badgerstore

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/internal/badger"
	"github.com/idemkit/idem/internal/engine"
	"github.com/idemkit/idem/internal/wal"
	"github.com/stretchr/testify/require"
)

// These tests simulate what a power loss does to Badger when it runs
// unsynced under the log: Badger loses writes (deleted here behind the
// log's back) while the log, synced, keeps them.

var walNow = time.Now().Truncate(time.Second)

func walOpen(t *testing.T, dir string, d backend.Durability) *Backend {
	t.Helper()
	b, err := Open(dir, Options{Durability: d})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func walClaim(t *testing.T, b *Backend, key string) uint64 {
	t.Helper()
	rec, claimed, err := b.Claim(context.Background(), "", key, backend.ClaimArgs{Now: walNow, LeaseEnds: walNow.Add(time.Minute)})
	require.NoError(t, err)
	require.True(t, claimed)
	return rec.Token
}

func walComplete(t *testing.T, b *Backend, key string, token uint64, body []byte) {
	t.Helper()
	require.NoError(t, b.Complete(context.Background(), "", key, token, backend.Completion{
		Result: backend.Result{Status: 200, Body: body}, At: walNow, ExpiresAt: walNow.Add(24 * time.Hour)}))
}

func walDo(t *testing.T, b *Backend, key string, body []byte) {
	t.Helper()
	walComplete(t, b, key, walClaim(t, b, key), body)
}

// forget deletes a record from Badger without going through the log, as a
// power loss would.
func forget(t *testing.T, b *Backend, keys ...string) {
	t.Helper()
	require.NoError(t, b.eng.DB().Update(func(txn *badger.Txn) error {
		for _, k := range keys {
			if err := txn.Delete(withPrefix(prefixRecord, recordID("", k))); err != nil {
				return err
			}
		}
		return nil
	}))
}

// readLog returns the log as a crash at this point would leave it.
func readLog(t *testing.T, dir string) []byte {
	t.Helper()
	log, err := os.ReadFile(filepath.Join(dir, engine.LogName))
	require.NoError(t, err)
	return log
}

// writeLog puts back a log read by readLog, undoing the checkpoints since.
func writeLog(t *testing.T, dir string, log []byte) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(dir, engine.LogName), log, 0o600))
}

func walGet(t *testing.T, b *Backend, key string) *backend.Record {
	t.Helper()
	rec, err := b.Get(context.Background(), "", key)
	if errors.Is(err, backend.ErrNotFound) {
		return nil
	}
	require.NoError(t, err)
	return rec
}

func TestWAL_ReplayRestoresWhatBadgerLost(t *testing.T) {
	dir := t.TempDir()
	b := walOpen(t, dir, backend.Durable)
	walDo(t, b, "k1", []byte("one"))
	walDo(t, b, "k2", []byte("two"))
	// The log as a crash would leave it: the frames of both cycles.
	log := readLog(t, dir)
	forget(t, b, "k1", "k2")
	require.Nil(t, walGet(t, b, "k1"))
	require.NoError(t, b.Close())
	writeLog(t, dir, log)

	b = walOpen(t, dir, backend.Durable)
	for k, body := range map[string]string{"k1": "one", "k2": "two"} {
		rec := walGet(t, b, k)
		require.NotNil(t, rec, k)
		require.Equal(t, backend.StateDone, rec.State, k)
		require.Equal(t, body, string(rec.Result.Body), k)
	}
	// The replay ended with a checkpoint: a second crash replays nothing.
	forget(t, b, "k1")
	require.NoError(t, b.Close())
	b = walOpen(t, dir, backend.Durable)
	require.Nil(t, walGet(t, b, "k1"), "a checkpointed frame must not be replayed over later writes")
	require.NotNil(t, walGet(t, b, "k2"))
}

func TestWAL_TornTailIsDropped(t *testing.T) {
	dir := t.TempDir()
	b := walOpen(t, dir, backend.Durable)
	walDo(t, b, "k1", []byte("one"))
	token := walClaim(t, b, "k2")
	claimEnd := b.eng.Log().Offset()
	walComplete(t, b, "k2", token, []byte("two"))
	end := claimEnd + int64(b.eng.Log().FrameLen()) // the frame, without its padding
	log := readLog(t, dir)
	require.Greater(t, b.eng.Log().Offset(), claimEnd)
	// A crash while writing the completion's frame: its last byte torn.
	log[end-1] ^= 0xff
	forget(t, b, "k1", "k2")
	require.NoError(t, b.Close())
	writeLog(t, dir, log)

	b = walOpen(t, dir, backend.Durable)
	require.Equal(t, backend.StateDone, walGet(t, b, "k1").State)
	rec := walGet(t, b, "k2")
	require.NotNil(t, rec, "the claim's frame was whole and must be replayed")
	require.Equal(t, backend.StateInProgress, rec.State, "the torn completion must not be applied")
	require.Nil(t, rec.Result)
	require.False(t, rec.LeaseEnds.After(time.Now()), "the replayed claim is orphaned at open")
}

func TestWAL_StaleGenerationIsNotReplayed(t *testing.T) {
	dir := t.TempDir()
	b := walOpen(t, dir, backend.Durable)
	walDo(t, b, "k1", []byte("one"))
	require.NoError(t, b.Close()) // checkpoint: a new generation; old frames stay on disk

	b = walOpen(t, dir, backend.Durable)
	forget(t, b, "k1") // a later, legitimate deletion
	require.NoError(t, b.Close())
	b = walOpen(t, dir, backend.Durable)
	require.Nil(t, walGet(t, b, "k1"), "frames of an earlier generation must not be replayed")
}

func TestWAL_FullLogCheckpointsAndLargeFramesGrowIt(t *testing.T) {
	dir := t.TempDir()
	b := walOpen(t, dir, backend.Durable)
	gen := b.eng.Log().Generation()
	body := bytes.Repeat([]byte("x"), 3<<20)
	for _, k := range []string{"a", "b", "c", "d"} {
		walDo(t, b, k, body)
	}
	require.Greater(t, b.eng.Log().Generation(), gen, "12 MiB of frames must have checkpointed an 8 MiB log")
	huge := bytes.Repeat([]byte("y"), wal.InitialSize+1<<20)
	walDo(t, b, "huge", huge)
	require.Greater(t, b.eng.Log().Size(), int64(wal.InitialSize))
	log := readLog(t, dir)
	forget(t, b, "huge")
	require.NoError(t, b.Close())
	writeLog(t, dir, log)

	b = walOpen(t, dir, backend.Durable)
	for _, k := range []string{"a", "b", "c", "d"} {
		require.Equal(t, body, walGet(t, b, k).Result.Body, k)
	}
	require.Equal(t, huge, walGet(t, b, "huge").Result.Body)
}

func TestWAL_FailedLogWriteStopsWritesUntilReopen(t *testing.T) {
	dir := t.TempDir()
	b := walOpen(t, dir, backend.Durable)
	walDo(t, b, "k1", []byte("one"))
	require.NoError(t, b.eng.Log().Close()) // every later write and sync fails
	_, _, err := b.Claim(context.Background(), "", "k2", backend.ClaimArgs{Now: walNow, LeaseEnds: walNow.Add(time.Minute)})
	require.ErrorIs(t, err, backend.ErrUnavailable)
	require.Nil(t, walGet(t, b, "k2"), "a claim whose frame failed must not be visible")
	_, _, err = b.Claim(context.Background(), "", "k3", backend.ClaimArgs{Now: walNow, LeaseEnds: walNow.Add(time.Minute)})
	require.ErrorIs(t, err, backend.ErrUnavailable, "writes stay refused once the log failed")
	require.Contains(t, err.Error(), "reopen")
	require.Equal(t, "one", string(walGet(t, b, "k1").Result.Body), "reads go on")
	_ = b.Close()

	b = walOpen(t, dir, backend.Durable)
	require.Equal(t, "one", string(walGet(t, b, "k1").Result.Body))
	walDo(t, b, "k3", []byte("three"))
}

func TestWAL_FastStoreReplaysALogLeftByDurable(t *testing.T) {
	dir := t.TempDir()
	b := walOpen(t, dir, backend.Durable)
	walDo(t, b, "k1", []byte("one"))
	log := readLog(t, dir)
	forget(t, b, "k1")
	require.NoError(t, b.Close())
	writeLog(t, dir, log)

	b = walOpen(t, dir, backend.Fast)
	require.Nil(t, b.eng.Log(), "a backend.Fast store writes no log")
	require.Equal(t, "one", string(walGet(t, b, "k1").Result.Body))
	forget(t, b, "k1")
	require.NoError(t, b.Close())
	b = walOpen(t, dir, backend.Durable)
	require.Nil(t, walGet(t, b, "k1"), "the backend.Fast open must have retired the frames it replayed")
}

func TestWAL_ForeignFileIsRefused(t *testing.T) {
	dir := t.TempDir()
	b := walOpen(t, dir, backend.Durable)
	require.NoError(t, b.Close())
	require.NoError(t, os.WriteFile(filepath.Join(dir, engine.LogName), []byte("not a log at all"), 0o600))
	_, err := Open(dir, Options{})
	require.ErrorIs(t, err, backend.ErrCorrupt)
	require.ErrorIs(t, err, backend.ErrUnavailable)
}

func TestWAL_ReadOnlyOpenRefusesUnappliedFrames(t *testing.T) {
	dir := t.TempDir()
	b := walOpen(t, dir, backend.Durable)
	walDo(t, b, "k1", []byte("one"))
	log := readLog(t, dir)
	require.NoError(t, b.Close())
	ro, err := Open(dir, Options{ReadOnly: true})
	require.NoError(t, err, "a cleanly closed store opens read-only")
	require.NoError(t, ro.Close())

	writeLog(t, dir, log)
	_, err = Open(dir, Options{ReadOnly: true})
	require.ErrorIs(t, err, ErrUnclean)
	require.ErrorIs(t, err, backend.ErrUnavailable)
	require.Equal(t, log, readLog(t, dir), "a read-only open writes nothing")

	b = walOpen(t, dir, backend.Durable)
	require.NoError(t, b.Close())
	ro, err = Open(dir, Options{ReadOnly: true})
	require.NoError(t, err, "a read-write open applied the frames")
	require.Equal(t, "one", string(walGet(t, ro, "k1").Result.Body))
	require.NoError(t, ro.Close())
}
