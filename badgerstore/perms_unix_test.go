//go:build unix

package badgerstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/badgerstore"
	"github.com/idemkit/idem/idemtest"
	"github.com/stretchr/testify/require"
)

// TestOpen_PrivateFiles: in a directory created 0755 under umask 022, Open
// makes the directory 0700 and the files in it 0600, at every open, and
// Close leaves them so; files loosened while it was closed are fixed at
// the next open.
func TestOpen_PrivateFiles(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	dir := filepath.Join(t.TempDir(), "store")
	require.NoError(t, os.Mkdir(dir, 0o755))
	require.NoError(t, os.Chmod(dir, 0o755))

	requirePrivate := func(when string) {
		t.Helper()
		info, err := os.Stat(dir)
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o700), info.Mode().Perm(), "%s: the directory", when)
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		require.NotEmpty(t, entries)
		for _, en := range entries {
			info, err := en.Info()
			require.NoError(t, err)
			if info.Mode().IsRegular() {
				require.Equal(t, os.FileMode(0o600), info.Mode().Perm(), "%s: %s", when, en.Name())
			}
		}
	}
	for i := range 2 {
		s, err := idem.Open(dir, &idem.Options{SweepInterval: -1})
		require.NoError(t, err)
		requirePrivate([]string{"first open", "reopen"}[i])
		_, _, err = s.Do(context.Background(), idem.Request{Key: "token", Fingerprint: "fp"},
			func(context.Context) (backend.Result, error) {
				return backend.Result{Status: 201, Body: []byte(`{"api_token":"secret"}`)}, nil
			})
		require.NoError(t, err)
		require.NoError(t, s.Close())
		requirePrivateTree(t, dir, "closed") // the table flushed at Close too
		loosen(t, dir)                       // as if someone, or an older version, loosened them
	}
}

// loosen makes everything under dir readable by all: 0644 and 0755.
func loosen(t *testing.T, dir string) {
	t.Helper()
	require.NoError(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.Chmod(path, 0o755)
		}
		return os.Chmod(path, 0o644)
	}))
}

// requirePrivateTree checks that dir and every directory under it are
// 0700 and every file under it 0600, and returns how many files it saw.
func requirePrivateTree(t *testing.T, dir, when string) int {
	t.Helper()
	files := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // removed meanwhile (a compaction, a GC)
		}
		if err != nil {
			return err
		}
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		require.NoError(t, err)
		rel, _ := filepath.Rel(dir, path)
		switch {
		case info.IsDir():
			require.Equal(t, fs.FileMode(0o700), info.Mode().Perm(), "%s: directory %s", when, rel)
		case info.Mode().IsRegular():
			files++
			require.Equal(t, fs.FileMode(0o600), info.Mode().Perm(), "%s: %s", when, rel)
		default:
			t.Errorf("%s: %s is neither a file nor a directory (%v)", when, rel, info.Mode())
		}
		return nil
	})
	require.NoError(t, err)
	return files
}

// withUmask runs f under each umask a user may have, the loosest last.
// syscall.Umask is the process's: these tests are not parallel.
func withUmask(t *testing.T, f func(t *testing.T)) {
	for _, mask := range []int{0o022, 0o000} {
		t.Run(fmt.Sprintf("umask%03o", mask), func(t *testing.T) {
			old := syscall.Umask(mask)
			defer syscall.Umask(old)
			f(t)
		})
	}
}

// TestStore_PrivateFiles_EveryFileItCreates: under umask 022 and 000,
// every file the store creates (tables flushed and compacted, value logs
// and their GC, memtable logs, MANIFEST, KEYREGISTRY, DISCARD, LOCK, the
// log and its checkpoints, the mark) is 0600 and every directory 0700
// from the moment it exists: while the store runs, after Close, after a
// reopen and in a restored copy, not only once the next Open fixed them.
func TestStore_PrivateFiles_EveryFileItCreates(t *testing.T) {
	withUmask(t, func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "store")
		clk := idemtest.NewClock(powerLossStart())
		rng := rand.New(rand.NewPCG(3, 4))
		s, err := openPowerLoss(dir, clk)
		require.NoError(t, err)
		t.Cleanup(func() {
			if s != nil {
				_ = s.Close()
			}
		})
		gone := 0
		for round := range 6 {
			writeGCRound(t, s, rng, round, func(string, []byte) {})
			gone += collectGCRound(t, s, clk, dir)
			requirePrivateTree(t, dir, fmt.Sprintf("round %d", round))
			if round%2 == 1 {
				require.NoError(t, s.Close())
				requirePrivateTree(t, dir, fmt.Sprintf("closed after round %d", round))
				s, err = openPowerLoss(dir, clk)
				require.NoError(t, err)
				requirePrivateTree(t, dir, fmt.Sprintf("reopened after round %d", round))
			}
		}
		require.Positive(t, gone, "no value-log GC rewrote a file: the run did not create what it checks")
		tables, err := filepath.Glob(filepath.Join(dir, "*.sst"))
		require.NoError(t, err)
		require.Greater(t, len(tables), 1, "the run flushed or compacted too little")

		var backup bytes.Buffer
		_, err = s.Backup(bg, &backup)
		require.NoError(t, err)
		require.NoError(t, s.Close())
		n := requirePrivateTree(t, dir, "closed")

		restored := filepath.Join(t.TempDir(), "restored")
		_, err = badgerstore.Restore(bg, &backup, restored, badgerstore.Options{})
		require.NoError(t, err)
		requirePrivateTree(t, restored, "restored")
		s, err = idem.Open(restored, nil)
		require.NoError(t, err)
		requirePrivateTree(t, restored, "restored and opened")
		require.NoError(t, s.Close())
		t.Logf("%d files checked in the store; %d value-log files collected", n, gone)
	})
}

// TestAcceptLoss_QuarantineIsPrivate: the tables an open under
// AcceptLoss keeps aside, and the directory that holds them, are the
// store's: 0600 and 0700, whatever the umask.
func TestAcceptLoss_QuarantineIsPrivate(t *testing.T) {
	withUmask(t, func(t *testing.T) {
		dir, _ := lostStore(t, 20)
		s := openLost(t, dir, nil, lossClock())
		q := filepath.Join(dir, "idem.quarantine")
		kept, err := os.ReadDir(q)
		require.NoError(t, err)
		require.NotEmpty(t, kept, "the open kept no table aside")
		requirePrivateTree(t, dir, "opened under AcceptLoss")
		require.NoError(t, s.Close())
		requirePrivateTree(t, dir, "closed")
		loosen(t, dir)
		s = openLost(t, dir, nil, lossClock())
		requirePrivateTree(t, dir, "loosened and reopened")
		require.NoError(t, s.Close())
	})
}
