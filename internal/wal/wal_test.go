package wal

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// modes runs a test with frames written with O_DIRECT (where the file
// system allows it) and through the page cache.
func modes(t *testing.T, fn func(t *testing.T, o Options)) {
	t.Run("direct", func(t *testing.T) { fn(t, Options{}) })
	t.Run("buffered", func(t *testing.T) { fn(t, Options{Buffered: true}) })
}

func open(t *testing.T, path string, o Options) (*Log, [][]Entry) {
	t.Helper()
	l, frames, err := Open(path, o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l, frames
}

func commit(t *testing.T, l *Log, es ...Entry) {
	t.Helper()
	l.Begin()
	for _, e := range es {
		l.Add(e)
	}
	require.NoError(t, l.Commit())
}

func set(k, v string, exp uint64) Entry {
	return Entry{Key: []byte(k), Value: []byte(v), ExpiresAt: exp}
}

func del(k string) Entry { return Entry{Key: []byte(k), Delete: true} }

func TestLog_AppendAndReplay(t *testing.T) {
	modes(t, func(t *testing.T, o Options) {
		path := filepath.Join(t.TempDir(), "log")
		l, frames := open(t, path, o)
		require.Empty(t, frames)
		if o.Buffered {
			require.False(t, l.Direct(), "Buffered turns O_DIRECT off")
		}
		commit(t, l, set("a", "1", 7), del("b"))
		commit(t, l, set("c", "", 0))
		require.NoError(t, l.Close())

		l, frames = open(t, path, o)
		require.Equal(t, [][]Entry{{set("a", "1", 7), del("b")}, {set("c", "", 0)}}, frames)
		// Appending goes on after the replayed frames.
		commit(t, l, set("d", "4", 0))
		require.NoError(t, l.Close())
		_, frames = open(t, path, o)
		require.Len(t, frames, 3)
	})
}

func TestLog_TornTailIsDropped(t *testing.T) {
	modes(t, func(t *testing.T, o Options) {
		path := filepath.Join(t.TempDir(), "log")
		l, _ := open(t, path, o)
		commit(t, l, set("a", "1", 0))
		start := l.Offset()
		commit(t, l, set("b", "2", 0))
		end := start + int64(l.FrameLen()) // the frame, without its padding
		require.NoError(t, l.Close())
		raw, err := os.ReadFile(path)
		require.NoError(t, err)
		raw[end-1] ^= 0xff // a crash while writing the second frame
		require.NoError(t, os.WriteFile(path, raw, 0o600))

		l, frames := open(t, path, o)
		require.Equal(t, [][]Entry{{set("a", "1", 0)}}, frames)
		require.Equal(t, start, l.Offset(), "the next frame overwrites the torn one")
	})
}

func TestLog_StaleGenerationIsNotReplayed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	l, _ := open(t, path, Options{})
	commit(t, l, set("a", "1", 0))
	commit(t, l, set("b", "2", 0))
	gen := l.Generation()
	require.NoError(t, l.Reset())
	require.Equal(t, gen+1, l.Generation())
	commit(t, l, set("c", "3", 0)) // overwrites a's frame; b's stays on disk
	require.NoError(t, l.Close())

	_, frames := open(t, path, Options{})
	require.Equal(t, [][]Entry{{set("c", "3", 0)}}, frames, "frames of an earlier generation are stale")
}

func TestLog_DamageIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	l, _ := open(t, path, Options{})
	l.Begin()
	l.buf = append(l.buf, 9, 1, 'k') // an entry kind no release writes
	require.NoError(t, l.Commit())
	require.NoError(t, l.Close())
	_, _, err := Open(path, Options{})
	require.ErrorIs(t, err, ErrCorrupt, "a frame with a good checksum that cannot be read is damage")
	_, err = Pending(path)
	require.ErrorIs(t, err, ErrCorrupt)

	require.NoError(t, os.WriteFile(path, []byte("not a log at all"), 0o600))
	_, _, err = Open(path, Options{})
	require.ErrorIs(t, err, ErrCorrupt)
}

func TestLog_TornHeaderStartsANewGeneration(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	l, _ := open(t, path, Options{})
	commit(t, l, set("a", "1", 0))
	require.NoError(t, l.Reset()) // a's frame is stale: the header is torn while rewritten
	gen := l.Generation()
	require.NoError(t, l.Close())
	flip(t, path, 17) // the header's checksum

	n, err := Pending(path)
	require.NoError(t, err)
	require.Zero(t, n)
	l, frames := open(t, path, Options{})
	require.Empty(t, frames)
	require.Greater(t, l.Generation(), gen)
}

func TestLog_Pending(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	n, err := Pending(path)
	require.NoError(t, err)
	require.Zero(t, n, "a missing log has nothing pending")
	l, _ := open(t, path, Options{})
	commit(t, l, set("a", "1", 0))
	commit(t, l, set("b", "1", 0))
	before, err := os.ReadFile(path)
	require.NoError(t, err)
	n, err = Pending(path)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, before, after, "Pending writes nothing")
}

func TestLog_FullLogAndLargeFrames(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	l, _ := open(t, path, Options{})
	body := string(bytes.Repeat([]byte("x"), 3<<20))
	full := false
	for range 4 {
		l.Begin()
		l.Add(set("k", body, 0))
		if l.Full() {
			full = true
			require.NoError(t, l.Reset())
		}
		require.NoError(t, l.Commit())
	}
	require.True(t, full, "12 MiB of frames do not fit an 8 MiB log")
	huge := string(bytes.Repeat([]byte("y"), InitialSize+1<<20))
	l.Begin()
	l.Add(set("huge", huge, 0))
	require.True(t, l.Full())
	require.NoError(t, l.Reset())
	require.NoError(t, l.Commit())
	require.Greater(t, l.Size(), int64(InitialSize), "a frame larger than the log grows it")
	require.NoError(t, l.Close())
	_, frames := open(t, path, Options{})
	require.Equal(t, [][]Entry{{set("huge", huge, 0)}}, frames)
}

func TestLog_DirectWritesWhereSupported(t *testing.T) {
	dir := t.TempDir()
	probe := filepath.Join(dir, "probe")
	require.NoError(t, os.WriteFile(probe, make([]byte, BlockSize), 0o600))
	d, ok := openDirectFile(probe)
	if !ok {
		t.Skip("the file system of the test directory refuses O_DIRECT")
	}
	d.close()
	l, _ := open(t, filepath.Join(dir, "log"), Options{})
	require.True(t, l.Direct())
	commit(t, l, set("a", "1", 0))
	commit(t, l, set("b", "2", 0))
	require.Equal(t, int64(headerLen+2*BlockSize), l.Offset(), "one block per small frame")
}

// TestLog_ReplaysTheEarlierLayout replays a log whose frames are packed
// end to end, as releases before block-aligned frames wrote it, and checks
// that the log goes on in the current layout after Reset.
func TestLog_ReplaysTheEarlierLayout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	l, _ := open(t, path, Options{})
	commit(t, l, set("a", "1", 0))
	commit(t, l, set("b", "2", 0))
	require.NoError(t, l.Close())
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, packLog(t, raw), 0o600))

	l, frames := open(t, path, Options{})
	require.Equal(t, [][]Entry{{set("a", "1", 0)}, {set("b", "2", 0)}}, frames)
	l.Begin()
	require.True(t, l.Full(), "a log of the earlier layout asks for a Reset")
	require.NoError(t, l.Reset())
	require.False(t, l.Full())
	commit(t, l, set("c", "3", 0))
	require.NoError(t, l.Close())
	raw, err = os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, magic, string(raw[:8]))
	_, frames = open(t, path, Options{})
	require.Equal(t, [][]Entry{{set("c", "3", 0)}}, frames)
}

// packLog rewrites a log of block-aligned frames in the earlier layout:
// the earlier magic, and the current generation's frames end to end.
func packLog(t *testing.T, log []byte) []byte {
	t.Helper()
	out := make([]byte, len(log))
	copy(out, magicV1)
	copy(out[8:16], log[8:16])
	binary.LittleEndian.PutUint32(out[16:20], crc32.Checksum(out[:16], castagnoli))
	gen := binary.LittleEndian.Uint64(log[8:16])
	at, frames := int64(headerLen), 0
	for off := int64(headerLen); off+frameHead <= int64(len(log)); frames++ {
		n := int64(binary.LittleEndian.Uint32(log[off:]))
		if n == 0 || binary.LittleEndian.Uint64(log[off+8:]) != gen {
			break
		}
		at += int64(copy(out[at:], log[off:off+frameHead+n]))
		off = alignUp(off+frameHead+n, BlockSize)
	}
	require.Positive(t, frames)
	return out
}

func TestDecodeEntries_RejectsMalformedEntries(t *testing.T) {
	for _, p := range [][]byte{{9, 1, 'k'}, {kindSet, 5, 'k'}, {kindSet, 1, 'k', 3, 'v'}, {kindSet, 1, 'k', 1, 'v'}, {kindDelete}} {
		_, err := decodeEntries(p)
		require.Error(t, err, "%v", p)
	}
	es, err := decodeEntries([]byte{kindDelete, 1, 'k', kindSet, 1, 'a', 1, 'v', 7})
	require.NoError(t, err)
	require.Equal(t, []Entry{del("k"), set("a", "v", 7)}, es)
}

// flip inverts the byte at off in the file at path.
func flip(t *testing.T, path string, off int64) {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	raw[off] ^= 0xff
	require.NoError(t, os.WriteFile(path, raw, 0o600))
}

// TestLog_DamageBeforeIntactFramesIsRefused damages a frame, or the
// header, that intact frames of the generation follow: that is not a torn
// tail (only the last frame written can be torn), and replaying up to it
// would drop acknowledged writes.
func TestLog_DamageBeforeIntactFramesIsRefused(t *testing.T) {
	for _, c := range []struct {
		name string
		off  func(first, second int64) int64
	}{
		{"payload", func(_, second int64) int64 { return second + frameHead + 2 }},
		{"length", func(_, second int64) int64 { return second }},
		{"sequence", func(_, second int64) int64 { return second + 16 }},
		{"generation", func(_, second int64) int64 { return second + 8 }},
		{"first frame", func(first, _ int64) int64 { return first + frameHead }},
		{"header checksum", func(int64, int64) int64 { return 17 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "log")
			l, _ := open(t, path, Options{})
			first := l.Offset()
			commit(t, l, set("a", "1", 0))
			second := l.Offset()
			commit(t, l, set("b", "2", 0))
			commit(t, l, set("c", "3", 0))
			require.NoError(t, l.Close())
			flip(t, path, c.off(first, second))

			_, _, err := Open(path, Options{})
			require.ErrorIs(t, err, ErrCorrupt)
			_, err = Pending(path)
			require.ErrorIs(t, err, ErrCorrupt)
		})
	}
}

// TestLog_TruncationIsRefused cuts the end off a log: every log of the
// current layout is at least InitialSize, in whole blocks.
func TestLog_TruncationIsRefused(t *testing.T) {
	for _, size := range []int64{0, headerLen, headerLen + 100, InitialSize - BlockSize} {
		path := filepath.Join(t.TempDir(), "log")
		l, _ := open(t, path, Options{})
		commit(t, l, set("a", "1", 0))
		require.NoError(t, l.Close())
		require.NoError(t, os.Truncate(path, size))
		_, _, err := Open(path, Options{})
		require.ErrorIs(t, err, ErrCorrupt, "truncated to %d", size)
	}
}
