package main

import (
	"bytes"
	"encoding/base64"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keyring"
	"github.com/stretchr/testify/require"
)

const secretMarker = "MARKER-c0ffee-4111111111111111"

// testRing is a ring of one key, for the command line's tests.
func testRing(t *testing.T) *keyring.Ring {
	t.Helper()
	r, err := keyring.New(keyring.Key{ID: "k1", Secret: bytes.Repeat([]byte{3}, keyring.KeySize)})
	require.NoError(t, err)
	return r
}

// leaks reports whether b holds the marker, in clear or in base64 (at
// each of the three alignments a base64 encoding can take).
func leaks(b []byte) bool {
	if bytes.Contains(b, []byte(secretMarker)) {
		return true
	}
	for pad := 0; pad < 3; pad++ {
		enc := base64.StdEncoding.EncodeToString(append(bytes.Repeat([]byte{0}, pad), secretMarker...))
		// Drop the characters the padding and the end touch.
		if bytes.Contains(b, []byte(enc[(pad*4+2)/3+1:len(enc)-4])) {
			return true
		}
	}
	return false
}

// storeDirLeaks reports the files under dir that hold the marker.
func storeDirLeaks(t *testing.T, dir string) []string {
	t.Helper()
	var found []string
	require.NoError(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if leaks(b) {
			found = append(found, path)
		}
		return nil
	}))
	return found
}

// TestEncryption_NothingInClear stores results, a saved error, a settled
// result and a journal's arguments carrying a marker in an encrypted store,
// then reads every byte of the store directory (idem.wal, Badger's logs and
// tables), a backup file and an export, without keys: the marker is
// nowhere. The same writes without keys leave it in all three, which
// shows the search finds it.
func TestEncryption_NothingInClear(t *testing.T) {
	for _, encrypted := range []bool{true, false} {
		name := map[bool]string{true: "encrypted", false: "plain"}[encrypted]
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "store")
			o := &idem.Options{SweepInterval: -1}
			if encrypted {
				o.Keys = testRing(t)
			}
			s, err := idem.Open(dir, o)
			require.NoError(t, err)
			idemtest.StoreSecrets(t, s, secretMarker)
			require.NoError(t, s.Close())

			backup := filepath.Join(t.TempDir(), "store.backup")
			mustRun(t, "backup", dir, backup)
			b, err := os.ReadFile(backup)
			require.NoError(t, err)
			export := mustRun(t, "export", dir)

			if !encrypted {
				require.NotEmpty(t, storeDirLeaks(t, dir), "the search finds nothing even in clear")
				require.True(t, leaks(b), "backup")
				require.True(t, leaks([]byte(export)), "export")
				return
			}
			require.Empty(t, storeDirLeaks(t, dir))
			require.False(t, leaks(b), "the backup holds the marker")
			require.False(t, leaks([]byte(export)), "the export holds the marker:\n%s", export)
		})
	}
}
