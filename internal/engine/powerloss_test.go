package engine

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOpen_FlushCaughtByAPowerCut builds what a power cut during a
// memtable flush leaves (TestPowerLoss in the root package met it): the
// files of the last checkpoint, the log of the writes since, and the
// table the flush wrote and synced, which the MANIFEST does not record
// yet and which holds versions newer than Badger's (the memtable log
// they were in was not synced). The log holds those writes: the open
// goes on, drops the table and replays them.
func TestOpen_FlushCaughtByAPowerCut(t *testing.T) {
	dir := filled(t)
	checkpoint := copyDir(t, dir)

	e := openEngine(t, dir, Options{Durable: true})
	put(t, e, "late1", "one")
	put(t, e, "late2", "two")
	log, err := os.ReadFile(filepath.Join(dir, LogName))
	require.NoError(t, err)
	require.NoError(t, e.Close()) // Badger flushes the memtable to a table

	var flushed []string
	for _, path := range tables(t, dir) {
		if _, err := os.Stat(filepath.Join(checkpoint, filepath.Base(path))); os.IsNotExist(err) {
			flushed = append(flushed, path)
		}
	}
	require.NotEmpty(t, flushed, "the close wrote no new table")
	cut := copyDir(t, checkpoint)
	for _, path := range flushed {
		raw, err := os.ReadFile(path)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(cut, filepath.Base(path)), raw, 0o600))
	}
	require.NoError(t, os.WriteFile(filepath.Join(cut, LogName), log, 0o600))

	require.NoError(t, tryOpen(t, cut, false))
	e = openEngine(t, cut, Options{Durable: true})
	for k, want := range map[string]string{"late1": "one", "late2": "two"} {
		v, ok := read(t, e, k)
		require.True(t, ok, k)
		require.Equal(t, want, v, k)
	}
}

// copyDir copies the files of dir to a new directory.
func copyDir(t *testing.T, dir string) string {
	t.Helper()
	to := t.TempDir()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, en := range entries {
		if en.IsDir() {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(dir, en.Name()))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(to, en.Name()), raw, 0o600))
	}
	return to
}
