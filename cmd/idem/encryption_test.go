package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
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
func leaks(b []byte) bool { return leaksOf(b, secretMarker) }

// leaksOf reports whether b holds marker, in clear or in base64.
func leaksOf(b []byte, marker string) bool {
	if bytes.Contains(b, []byte(marker)) {
		return true
	}
	for pad := 0; pad < 3; pad++ {
		enc := base64.StdEncoding.EncodeToString(append(bytes.Repeat([]byte{0}, pad), marker...))
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
	found, _ := storeDirLeaksOf(t, dir, secretMarker)
	return found
}

// storeDirLeaksOf reports the files under dir that hold marker, and every
// file it read.
func storeDirLeaksOf(t *testing.T, dir, marker string) (found, read []string) {
	t.Helper()
	require.NoError(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		read = append(read, filepath.Base(path))
		if leaksOf(b, marker) {
			found = append(found, path)
		}
		return nil
	}))
	return found, read
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

// writeKey writes a key file named id.key holding b repeated, in hex.
func writeKey(t *testing.T, dir, id string, b byte) string {
	t.Helper()
	p := filepath.Join(dir, id+".key")
	require.NoError(t, os.WriteFile(p, []byte(hex.EncodeToString(bytes.Repeat([]byte{b}, keyring.KeySize))+"\n"), 0o600))
	return p
}

// idem rekey seals every result under the active key; run again it has
// nothing to do; without the old key, inspect still reads every record;
// a store read without the key it needs says which key the result is
// sealed under.
func TestRekeyCommand(t *testing.T) {
	keys := t.TempDir()
	oldKey, newKey := writeKey(t, keys, "2026-12", 1), writeKey(t, keys, "2027-01", 2)
	ring, err := loadKeys(context.Background(), oldKey)
	require.NoError(t, err)
	dir := filepath.Join(t.TempDir(), "store")
	s, err := idem.Open(dir, &idem.Options{SweepInterval: -1, Keys: ring})
	require.NoError(t, err)
	n := idemtest.StoreSecrets(t, s, secretMarker)
	require.NoError(t, s.Close())

	code, _, errOut := runIdem(t, "rekey", dir)
	require.Equal(t, 2, code, "rekey without keys is a usage error: %s", errOut)
	require.Contains(t, errOut, keysEnv)

	out := mustRun(t, "rekey", dir, "-keys", newKey+","+oldKey, "-json")
	var r idem.RekeyReport
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.Equal(t, idem.RekeyReport{Scanned: n, Rekeyed: n}, r)

	t.Setenv(keysEnv, newKey+","+oldKey)
	out = mustRun(t, "rekey", dir)
	require.Contains(t, out, fmt.Sprintf("%d results scanned, 0 sealed again under 2027-01, %d already under it", n, n))

	t.Setenv(keysEnv, "")
	out = mustRun(t, "inspect", dir, "-scope", "tenant-a", "-keys", newKey, "secret-result")
	require.Contains(t, out, "secret-result")
	out = mustRun(t, "inspect", dir, "-scope", "tenant-a", "-keys", oldKey, "secret-result")
	require.Contains(t, out, `sealed under key "2027-01" (not given)`, "the story reads without the key")
	code, out, _ = runIdem(t, "rekey", dir, "-keys", oldKey)
	require.Equal(t, 1, code)
	require.Contains(t, out, fmt.Sprintf("left: %d missing their key (2027-01)", n))
	require.Empty(t, storeDirLeaks(t, dir))
}
