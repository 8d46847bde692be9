package idem

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/stretchr/testify/require"
)

// These tests simulate what a power loss does to Badger when it runs
// unsynced under the log: Badger loses writes (deleted here behind the
// log's back) while the log, synced, keeps them.

var walNow = time.Now().Truncate(time.Second)

func walOpen(t *testing.T, dir string, d Durability) *BadgerBackend {
	t.Helper()
	b, err := OpenBadger(dir, BadgerOptions{Durability: d})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func walClaim(t *testing.T, b *BadgerBackend, key string) uint64 {
	t.Helper()
	rec, claimed, err := b.Claim(context.Background(), "", key, ClaimArgs{Now: walNow, LeaseEnds: walNow.Add(time.Minute)})
	require.NoError(t, err)
	require.True(t, claimed)
	return rec.Token
}

func walComplete(t *testing.T, b *BadgerBackend, key string, token uint64, body []byte) {
	t.Helper()
	require.NoError(t, b.Complete(context.Background(), "", key, token, Completion{
		Result: Result{Status: 200, Body: body}, At: walNow, ExpiresAt: walNow.Add(24 * time.Hour)}))
}

func walDo(t *testing.T, b *BadgerBackend, key string, body []byte) {
	t.Helper()
	walComplete(t, b, key, walClaim(t, b, key), body)
}

// forget deletes a record from Badger without going through the log, as a
// power loss would.
func forget(t *testing.T, b *BadgerBackend, keys ...string) {
	t.Helper()
	require.NoError(t, b.db.Update(func(txn *badger.Txn) error {
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
	log, err := os.ReadFile(filepath.Join(dir, walName))
	require.NoError(t, err)
	return log
}

// writeLog puts back a log read by readLog, undoing the checkpoints since.
func writeLog(t *testing.T, dir string, log []byte) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(dir, walName), log, 0o600))
}

func walGet(t *testing.T, b *BadgerBackend, key string) *Record {
	t.Helper()
	rec, err := b.Get(context.Background(), "", key)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	require.NoError(t, err)
	return rec
}

func TestWAL_ReplayRestoresWhatBadgerLost(t *testing.T) {
	dir := t.TempDir()
	b := walOpen(t, dir, Durable)
	walDo(t, b, "k1", []byte("one"))
	walDo(t, b, "k2", []byte("two"))
	// The log as a crash would leave it: the frames of both cycles.
	log := readLog(t, dir)
	forget(t, b, "k1", "k2")
	require.Nil(t, walGet(t, b, "k1"))
	require.NoError(t, b.Close())
	writeLog(t, dir, log)

	b = walOpen(t, dir, Durable)
	for k, body := range map[string]string{"k1": "one", "k2": "two"} {
		rec := walGet(t, b, k)
		require.NotNil(t, rec, k)
		require.Equal(t, StateDone, rec.State, k)
		require.Equal(t, body, string(rec.Result.Body), k)
	}
	// The replay ended with a checkpoint: a second crash replays nothing.
	forget(t, b, "k1")
	require.NoError(t, b.Close())
	b = walOpen(t, dir, Durable)
	require.Nil(t, walGet(t, b, "k1"), "a checkpointed frame must not be replayed over later writes")
	require.NotNil(t, walGet(t, b, "k2"))
}

func TestWAL_TornTailIsDropped(t *testing.T) {
	dir := t.TempDir()
	b := walOpen(t, dir, Durable)
	walDo(t, b, "k1", []byte("one"))
	token := walClaim(t, b, "k2")
	claimEnd := b.wal.off
	walComplete(t, b, "k2", token, []byte("two"))
	end := claimEnd + int64(len(b.wal.buf)) // the frame, without its padding
	log := readLog(t, dir)
	require.Greater(t, b.wal.off, claimEnd)
	// A crash while writing the completion's frame: its last byte torn.
	log[end-1] ^= 0xff
	forget(t, b, "k1", "k2")
	require.NoError(t, b.Close())
	writeLog(t, dir, log)

	b = walOpen(t, dir, Durable)
	require.Equal(t, StateDone, walGet(t, b, "k1").State)
	rec := walGet(t, b, "k2")
	require.NotNil(t, rec, "the claim's frame was whole and must be replayed")
	require.Equal(t, StateInProgress, rec.State, "the torn completion must not be applied")
	require.Nil(t, rec.Result)
	require.False(t, rec.LeaseEnds.After(time.Now()), "the replayed claim is orphaned at open")
}

func TestWAL_StaleGenerationIsNotReplayed(t *testing.T) {
	dir := t.TempDir()
	b := walOpen(t, dir, Durable)
	walDo(t, b, "k1", []byte("one"))
	require.NoError(t, b.Close()) // checkpoint: a new generation; old frames stay on disk

	b = walOpen(t, dir, Durable)
	forget(t, b, "k1") // a later, legitimate deletion
	require.NoError(t, b.Close())
	b = walOpen(t, dir, Durable)
	require.Nil(t, walGet(t, b, "k1"), "frames of an earlier generation must not be replayed")
}

func TestWAL_FullLogCheckpointsAndLargeFramesGrowIt(t *testing.T) {
	dir := t.TempDir()
	b := walOpen(t, dir, Durable)
	gen := b.wal.gen
	body := bytes.Repeat([]byte("x"), 3<<20)
	for _, k := range []string{"a", "b", "c", "d"} {
		walDo(t, b, k, body)
	}
	require.Greater(t, b.wal.gen, gen, "12 MiB of frames must have checkpointed an 8 MiB log")
	huge := bytes.Repeat([]byte("y"), walSize+1<<20)
	walDo(t, b, "huge", huge)
	require.Greater(t, b.wal.size, int64(walSize))
	log := readLog(t, dir)
	forget(t, b, "huge")
	require.NoError(t, b.Close())
	writeLog(t, dir, log)

	b = walOpen(t, dir, Durable)
	for _, k := range []string{"a", "b", "c", "d"} {
		require.Equal(t, body, walGet(t, b, k).Result.Body, k)
	}
	require.Equal(t, huge, walGet(t, b, "huge").Result.Body)
}

func TestWAL_FailedLogWriteStopsWritesUntilReopen(t *testing.T) {
	dir := t.TempDir()
	b := walOpen(t, dir, Durable)
	walDo(t, b, "k1", []byte("one"))
	require.NoError(t, b.wal.f.Close()) // every later write and sync fails
	if b.wal.direct != nil {
		b.wal.direct.close()
	}
	_, _, err := b.Claim(context.Background(), "", "k2", ClaimArgs{Now: walNow, LeaseEnds: walNow.Add(time.Minute)})
	require.ErrorIs(t, err, ErrUnavailable)
	require.Nil(t, walGet(t, b, "k2"), "a claim whose frame failed must not be visible")
	_, _, err = b.Claim(context.Background(), "", "k3", ClaimArgs{Now: walNow, LeaseEnds: walNow.Add(time.Minute)})
	require.ErrorIs(t, err, ErrUnavailable, "writes stay refused once the log failed")
	require.Contains(t, err.Error(), "reopen")
	require.Equal(t, "one", string(walGet(t, b, "k1").Result.Body), "reads go on")
	_ = b.Close()

	b = walOpen(t, dir, Durable)
	require.Equal(t, "one", string(walGet(t, b, "k1").Result.Body))
	walDo(t, b, "k3", []byte("three"))
}

func TestWAL_FastStoreReplaysALogLeftByDurable(t *testing.T) {
	dir := t.TempDir()
	b := walOpen(t, dir, Durable)
	walDo(t, b, "k1", []byte("one"))
	log := readLog(t, dir)
	forget(t, b, "k1")
	require.NoError(t, b.Close())
	writeLog(t, dir, log)

	b = walOpen(t, dir, Fast)
	require.Nil(t, b.wal, "a Fast store writes no log")
	require.Equal(t, "one", string(walGet(t, b, "k1").Result.Body))
	forget(t, b, "k1")
	require.NoError(t, b.Close())
	b = walOpen(t, dir, Durable)
	require.Nil(t, walGet(t, b, "k1"), "the Fast open must have retired the frames it replayed")
}

func TestWAL_ForeignFileIsRefused(t *testing.T) {
	dir := t.TempDir()
	b := walOpen(t, dir, Durable)
	require.NoError(t, b.Close())
	require.NoError(t, os.WriteFile(filepath.Join(dir, walName), []byte("not a log at all"), 0o600))
	_, err := OpenBadger(dir, BadgerOptions{})
	require.ErrorIs(t, err, ErrCorrupt)
	require.ErrorIs(t, err, ErrUnavailable)
}

func TestWAL_DecodeRejectsMalformedEntries(t *testing.T) {
	for _, p := range [][]byte{{9, 1, 'k'}, {walSet, 5, 'k'}, {walSet, 1, 'k', 3, 'v'}, {walSet, 1, 'k', 1, 'v'}, {walDelete}} {
		_, err := decodeEntries(p)
		require.Error(t, err, "%v", p)
	}
	es, err := decodeEntries([]byte{walDelete, 1, 'k', walSet, 1, 'a', 1, 'v', 7})
	require.NoError(t, err)
	require.Equal(t, []walEntry{{del: true, key: []byte("k")}, {key: []byte("a"), val: []byte("v"), expiresAt: 7}}, es)
}

func TestWAL_ReadOnlyOpenRefusesUnappliedFrames(t *testing.T) {
	dir := t.TempDir()
	b := walOpen(t, dir, Durable)
	walDo(t, b, "k1", []byte("one"))
	log := readLog(t, dir)
	require.NoError(t, b.Close())
	ro, err := OpenBadger(dir, BadgerOptions{ReadOnly: true})
	require.NoError(t, err, "a cleanly closed store opens read-only")
	require.NoError(t, ro.Close())

	writeLog(t, dir, log)
	_, err = OpenBadger(dir, BadgerOptions{ReadOnly: true})
	require.ErrorIs(t, err, ErrUnclean)
	require.ErrorIs(t, err, ErrUnavailable)
	require.Equal(t, log, readLog(t, dir), "a read-only open writes nothing")

	b = walOpen(t, dir, Durable)
	require.NoError(t, b.Close())
	ro, err = OpenBadger(dir, BadgerOptions{ReadOnly: true})
	require.NoError(t, err, "a read-write open applied the frames")
	require.Equal(t, "one", string(walGet(t, ro, "k1").Result.Body))
	require.NoError(t, ro.Close())
}

// TestWAL_BufferedWrites runs the log's tests with frames written through
// the page cache and fdatasync, the path taken where O_DIRECT is refused.
func TestWAL_BufferedWrites(t *testing.T) {
	walDirect = false
	defer func() { walDirect = true }()
	b := walOpen(t, t.TempDir(), Durable)
	require.Nil(t, b.wal.direct)
	t.Run("replay", TestWAL_ReplayRestoresWhatBadgerLost)
	t.Run("torn tail", TestWAL_TornTailIsDropped)
	t.Run("full log", TestWAL_FullLogCheckpointsAndLargeFramesGrowIt)
	t.Run("failed write", TestWAL_FailedLogWriteStopsWritesUntilReopen)
}

// TestWAL_DirectWritesWhereSupported checks that the log writes its
// frames with O_DIRECT where the file system allows it, each frame on a
// block boundary.
func TestWAL_DirectWritesWhereSupported(t *testing.T) {
	dir := t.TempDir()
	probe := filepath.Join(dir, "probe")
	require.NoError(t, os.WriteFile(probe, make([]byte, walBlock), 0o600))
	d, ok := openDirectFile(probe)
	if !ok {
		t.Skip("the file system of the test directory refuses O_DIRECT")
	}
	d.close()
	b := walOpen(t, dir, Durable)
	require.NotNil(t, b.wal.direct)
	walDo(t, b, "k1", []byte("one"))
	require.Zero(t, b.wal.off%walBlock)
	require.Equal(t, int64(walHeaderLen+2*walBlock), b.wal.off, "a claim and a completion: one block each")
}

// TestWAL_ReplaysALogOfTheEarlierLayout replays a log whose frames are
// packed end to end, as releases before block-aligned frames wrote it,
// and checks that the log goes on in the current layout.
func TestWAL_ReplaysALogOfTheEarlierLayout(t *testing.T) {
	dir := t.TempDir()
	b := walOpen(t, dir, Durable)
	walDo(t, b, "k1", []byte("one"))
	walDo(t, b, "k2", []byte("two"))
	log := packLog(t, readLog(t, dir))
	forget(t, b, "k1", "k2")
	require.NoError(t, b.Close())
	writeLog(t, dir, log)

	b = walOpen(t, dir, Durable)
	require.Equal(t, "one", string(walGet(t, b, "k1").Result.Body))
	require.Equal(t, "two", string(walGet(t, b, "k2").Result.Body))
	require.Equal(t, int64(walBlock), b.wal.align)
	require.Equal(t, walMagic, string(readLog(t, dir)[:8]), "the replay's checkpoint starts the current layout")

	// And the current layout replays in turn.
	walDo(t, b, "k3", []byte("three"))
	log = readLog(t, dir)
	forget(t, b, "k3")
	require.NoError(t, b.Close())
	writeLog(t, dir, log)
	b = walOpen(t, dir, Durable)
	require.Equal(t, "three", string(walGet(t, b, "k3").Result.Body))
}

// packLog rewrites a log of block-aligned frames in the earlier layout:
// the earlier magic, and the current generation's frames end to end.
func packLog(t *testing.T, log []byte) []byte {
	t.Helper()
	out := make([]byte, len(log))
	copy(out, walMagicV1)
	copy(out[8:16], log[8:16])
	binary.LittleEndian.PutUint32(out[16:20], crc32.Checksum(out[:16], castagnoli))
	gen := binary.LittleEndian.Uint64(log[8:16])
	at, frames := int64(walHeaderLen), 0
	for off := int64(walHeaderLen); off+walFrameHead <= int64(len(log)); frames++ {
		n := int64(binary.LittleEndian.Uint32(log[off:]))
		if n == 0 || binary.LittleEndian.Uint64(log[off+8:]) != gen {
			break
		}
		at += int64(copy(out[at:], log[off:off+walFrameHead+n]))
		off = alignUp(off+walFrameHead+n, walBlock)
	}
	require.Positive(t, frames)
	return out
}
