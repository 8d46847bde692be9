//go:build unix

package idem_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/idemkit/idem"
	"github.com/stretchr/testify/require"
)

// TestOpen_PrivateFiles: in a directory created 0755 under umask 022, Open
// makes the directory 0700 and the files in it 0600, at every open.
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
			func(context.Context) (idem.Result, error) {
				return idem.Result{Status: 201, Body: []byte(`{"api_token":"secret"}`)}, nil
			})
		require.NoError(t, err)
		require.NoError(t, s.Close())
		// Files Badger created after Open (tables flushed at Close) may
		// have its own modes; the 0700 directory keeps them private, and
		// the next Open makes them 0600.
		info, err := os.Stat(dir)
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o700), info.Mode().Perm())
		require.NoError(t, os.Chmod(dir, 0o755)) // as if someone loosened it
	}
}
