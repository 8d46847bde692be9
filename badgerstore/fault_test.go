package badgerstore_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/idemtest"
	"github.com/stretchr/testify/require"
)

// faultBody is the body acknowledged for key i: every third is over the
// value threshold, so it lives in the value log.
func faultBody(i int) []byte {
	b := []byte(fmt.Sprintf("body-%04d;", i))
	if i%3 == 0 {
		b = bytes.Repeat(b, 2000)
	}
	return b
}

// faultStore writes n acknowledged results into a store in a new
// directory, closes it, and returns the directory.
func faultStore(t *testing.T, n int) string {
	t.Helper()
	dir := t.TempDir()
	s := openStore(t, dir, nil)
	for i := range n {
		_, _, err := s.Do(bg, idem.Request{Key: fmt.Sprint(i)}, ok(string(faultBody(i))))
		require.NoError(t, err)
	}
	require.NoError(t, s.Close())
	return dir
}

// copyDir copies the files of src into a new directory.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	entries, err := os.ReadDir(src)
	require.NoError(t, err)
	for _, en := range entries {
		if en.IsDir() {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(src, en.Name()))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dst, en.Name()), raw, 0o600))
	}
	return dst
}

func firstFile(t *testing.T, dir, pattern string) string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, pattern))
	require.NoError(t, err)
	require.NotEmpty(t, m, "no %s in the store", pattern)
	return m[0]
}

func truncateHalf(t *testing.T, path string) {
	t.Helper()
	info, err := os.Stat(path)
	require.NoError(t, err)
	require.NoError(t, os.Truncate(path, info.Size()/2))
}

// TestBadger_DamagedCopies damages copies of a real store, file by file:
// each open either fails (ErrCorrupt, never a panic or a signal) or
// replays every acknowledged key with its own body, running no effect.
// Bit flips inside table blocks are TestBadger_TableBitFlips's; inside a
// record, TestBadger_CorruptRecord's.
func TestBadger_DamagedCopies(t *testing.T) {
	const n = 300
	src := faultStore(t, n)
	for _, c := range []struct {
		name   string
		damage func(t *testing.T, dir string)
	}{
		{"none", func(*testing.T, string) {}},
		{"MANIFEST deleted", func(t *testing.T, dir string) { require.NoError(t, os.Remove(filepath.Join(dir, "MANIFEST"))) }},
		{"MANIFEST truncated", func(t *testing.T, dir string) { truncateHalf(t, filepath.Join(dir, "MANIFEST")) }},
		{"table truncated", func(t *testing.T, dir string) { truncateHalf(t, firstFile(t, dir, "*.sst")) }},
		{"table deleted", func(t *testing.T, dir string) { require.NoError(t, os.Remove(firstFile(t, dir, "*.sst"))) }},
		{"log deleted", func(t *testing.T, dir string) { require.NoError(t, os.Remove(filepath.Join(dir, "idem.wal"))) }},
		{"log truncated", func(t *testing.T, dir string) { truncateHalf(t, filepath.Join(dir, "idem.wal")) }},
		{"mark deleted", func(t *testing.T, dir string) { require.NoError(t, os.Remove(filepath.Join(dir, "idem.mark"))) }},
		{"value log truncated", func(t *testing.T, dir string) { truncateHalf(t, firstFile(t, dir, "*.vlog")) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := copyDir(t, src)
			c.damage(t, dir)
			checkReplays(t, dir, n)
		})
	}
}

// TestBadger_BitFlips flips one bit at a time, at places spread over
// every table and value log, each in a copy of a real store: an open
// fails, a key is ErrCorrupt, or it replays its own body.
func TestBadger_BitFlips(t *testing.T) {
	const n, per = 300, 12
	src := faultStore(t, n)
	for _, pattern := range []string{"*.sst", "*.vlog"} {
		files, err := filepath.Glob(filepath.Join(src, pattern))
		require.NoError(t, err)
		require.NotEmpty(t, files)
		for _, f := range files {
			info, err := os.Stat(f)
			require.NoError(t, err)
			for j := range per {
				off := info.Size() * int64(j) / per
				t.Run(fmt.Sprintf("%s@%d", filepath.Base(f), off), func(t *testing.T) {
					dir := copyDir(t, src)
					path := filepath.Join(dir, filepath.Base(f))
					raw, err := os.ReadFile(path)
					require.NoError(t, err)
					raw[off] ^= 1 << (j % 8)
					require.NoError(t, os.WriteFile(path, raw, 0o600))
					checkReplays(t, dir, n)
				})
			}
		}
	}
}

// checkReplays opens dir: the open fails (ErrCorrupt where idem's checks
// find the damage; Badger's own errors, such as a value log whose header
// is damaged, are ErrUnavailable), or every key of faultStore either
// replays its own body or is ErrCorrupt naming it; no effect runs.
func checkReplays(t *testing.T, dir string, n int) {
	t.Helper()
	s, err := idem.Open(dir, &idem.Options{SweepInterval: -1,
		Clock: idemtest.NewClock(time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC))}) // openStore's
	if err != nil {
		require.ErrorIs(t, err, backend.ErrUnavailable)
		t.Logf("refused: %v", err)
		return
	}
	defer s.Close()
	damaged := 0
	for i := range n {
		res, replayed, err := s.Do(bg, idem.Request{Key: fmt.Sprint(i)}, func(context.Context) (backend.Result, error) {
			return backend.Result{}, fmt.Errorf("the effect of key %d ran again", i)
		})
		if err != nil {
			require.ErrorIs(t, err, backend.ErrCorrupt, "key %d", i)
			require.ErrorContains(t, err, fmt.Sprintf("key %q", fmt.Sprint(i)), "the error names the key")
			damaged++
			continue
		}
		require.True(t, replayed, "key %d", i)
		require.Equal(t, faultBody(i), res.Body, "key %d replayed another body", i)
	}
	if damaged > 0 {
		t.Logf("%d keys damaged", damaged)
	}
}
