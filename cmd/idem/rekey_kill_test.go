package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/keyring"
	"github.com/stretchr/testify/require"
)

// rekeyChildEnv carries, to TestRekeyCommand_Child, the arguments of the
// idem rekey it runs.
const rekeyChildEnv = "IDEM_REKEY_CHILD_ARGS"

// TestRekeyCommand_Child runs idem rekey in a process of its own, for
// TestRekeyCommand_KilledAndRerun to SIGKILL.
func TestRekeyCommand_Child(t *testing.T) {
	args := os.Getenv(rekeyChildEnv)
	if args == "" {
		t.Skip("run by TestRekeyCommand_KilledAndRerun")
	}
	var a []string
	require.NoError(t, json.Unmarshal([]byte(args), &a))
	os.Exit(run(context.Background(), a, os.Stdout, os.Stderr))
}

// idem rekey killed (SIGKILL) part way through, then run again: the
// second run seals what the first did not, every record reads under the
// new key, and none is lost or sealed twice over.
func TestRekeyCommand_KilledAndRerun(t *testing.T) {
	if testing.Short() {
		t.Skip("writes and re-seals a thousand records in child processes")
	}
	keys := t.TempDir()
	oldKey, newKey := writeKey(t, keys, "old", 1), writeKey(t, keys, "new", 2)
	ring, err := loadKeys(context.Background(), oldKey)
	require.NoError(t, err)
	dir := filepath.Join(t.TempDir(), "store")
	const n = 1000
	s, err := idem.Open(dir, &idem.Options{SweepInterval: -1, Keys: ring, Durability: idem.Fast})
	require.NoError(t, err)
	for i := range n {
		_, _, err := s.Do(context.Background(), idem.Request{Key: "k" + strconv.Itoa(i)},
			func(context.Context) (idem.Result, error) {
				return idem.Result{Status: 200, Body: []byte(secretMarker)}, nil
			})
		require.NoError(t, err)
	}
	require.NoError(t, s.Close())

	// underNew counts the results sealed under the new key.
	underNew := func() int {
		t.Helper()
		r, err := loadKeys(context.Background(), newKey+","+oldKey)
		require.NoError(t, err)
		s, err := idem.Open(dir, &idem.Options{SweepInterval: -1, Keys: r})
		require.NoError(t, err)
		defer s.Close()
		count, all := 0, 0
		require.NoError(t, s.Backend().(backend.Lister).Scan(context.Background(), func(rec *idem.Record) bool {
			if rec.Scope == idem.EncryptionScope {
				return true // the store's marker, not a result
			}
			all++
			if id, ok := keyring.Sealed(rec.Result); ok && id == "new" {
				count++
			}
			return true
		}))
		require.Equal(t, n, all, "every record is still there")
		return count
	}

	// Kill a rekey at a delay that lands part way: shorter when it
	// finished, longer when it had not begun.
	delay, sealed := 150*time.Millisecond, 0
	for try := 0; try < 10; try++ {
		args, err := json.Marshal([]string{"rekey", dir, "-keys", newKey + "," + oldKey})
		require.NoError(t, err)
		child := exec.Command(os.Args[0], "-test.run=^TestRekeyCommand_Child$", "-test.count=1")
		child.Env = append(os.Environ(), rekeyChildEnv+"="+string(args))
		require.NoError(t, child.Start())
		time.Sleep(delay)
		_ = child.Process.Signal(syscall.SIGKILL)
		err = child.Wait()
		var exit *exec.ExitError
		killed := errors.As(err, &exit) && exit.Sys().(syscall.WaitStatus).Signaled()
		sealed = underNew()
		t.Logf("try %d: killed after %s (killed %v): %d of %d sealed under the new key", try+1, delay, killed, sealed, n)
		if killed && sealed > 0 && sealed < n {
			break
		}
		if sealed == n {
			// Too late: seal everything under the old key again and
			// kill sooner.
			mustRun(t, "rekey", dir, "-keys", oldKey+","+newKey)
			delay = delay * 2 / 3
		} else {
			delay = delay * 3 / 2
		}
	}
	require.True(t, sealed > 0 && sealed < n, "no try killed the rekey part way (%d of %d sealed)", sealed, n)

	out := mustRun(t, "rekey", dir, "-keys", newKey+","+oldKey, "-json")
	var r idem.RekeyReport
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.Equal(t, idem.RekeyReport{Scanned: n, Rekeyed: n - sealed, Current: sealed}, r)
	require.Equal(t, n, underNew())
	require.Empty(t, storeDirLeaks(t, dir))
}
