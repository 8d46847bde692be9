package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/stretchr/testify/require"
)

func TestBackupRestore(t *testing.T) {
	dir := verifiedStore(t)
	file := filepath.Join(t.TempDir(), "store.backup")
	out := mustRun(t, "backup", dir, file)
	require.Contains(t, out, "backed up store ")
	require.Contains(t, out, file)

	restored := filepath.Join(t.TempDir(), "restored")
	code, out, errOut := runIdem(t, "restore", "-json", file, restored)
	require.Equal(t, 0, code, "%s%s", out, errOut)
	var info backend.BackupInfo
	require.NoError(t, json.Unmarshal([]byte(out), &info))
	st, err := os.Stat(file)
	require.NoError(t, err)
	require.Equal(t, st.Size(), info.Bytes)
	require.Len(t, info.SHA256, 64)

	s, err := idem.Open(restored, &idem.Options{SweepInterval: -1})
	require.NoError(t, err)
	defer s.Close()
	for _, k := range []string{"k0", "k7", "k19"} {
		res, replayed, err := s.Do(context.Background(), idem.Request{Key: k}, func(context.Context) (idem.Result, error) {
			t.Errorf("%s ran again", k)
			return idem.Result{}, nil
		})
		require.NoError(t, err)
		require.True(t, replayed)
		require.Equal(t, "b", string(res.Body))
	}

	// Into a directory that is not empty: refused, the store in it untouched.
	code, _, errOut = runIdem(t, "restore", file, dir)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "not empty")
	mustRun(t, "verify", dir)
}

func TestBackup_ToStdout(t *testing.T) {
	dir := verifiedStore(t)
	code, out, errOut := runIdem(t, "backup", dir, "-")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, errOut, "backed up store ", "the report goes to stderr when the file is stdout")
	file := filepath.Join(t.TempDir(), "store.backup")
	require.NoError(t, os.WriteFile(file, []byte(out), 0o600))
	mustRun(t, "restore", file, "-dir", filepath.Join(t.TempDir(), "restored"))
}

func TestBackup_HeldStore(t *testing.T) {
	dir := verifiedStore(t)
	s, err := idem.Open(dir, &idem.Options{SweepInterval: -1})
	require.NoError(t, err)
	defer s.Close()
	file := filepath.Join(t.TempDir(), "store.backup")
	code, out, errOut := runIdem(t, "backup", dir, file)
	require.Equal(t, 1, code, "%s%s", out, errOut)
	require.Contains(t, errOut, "held by a running process")
	require.Contains(t, errOut, "/backup")
	_, err = os.Stat(file)
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestRestore_DamagedFile(t *testing.T) {
	dir := verifiedStore(t)
	file := filepath.Join(t.TempDir(), "store.backup")
	mustRun(t, "backup", dir, file)
	raw, err := os.ReadFile(file)
	require.NoError(t, err)
	raw[len(raw)/2] ^= 0x04
	require.NoError(t, os.WriteFile(file, raw, 0o600))
	restored := filepath.Join(t.TempDir(), "restored")
	code, _, errOut := runIdem(t, "restore", file, restored)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "not a whole idem backup")
	entries, _ := os.ReadDir(restored)
	require.Empty(t, entries)
}

func TestBackup_Usage(t *testing.T) {
	code, _, errOut := runIdem(t, "backup", t.TempDir())
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "usage: idem backup")
}
