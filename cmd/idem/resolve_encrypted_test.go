package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/stretchr/testify/require"
)

// builtIdem builds the command once per test binary, for the tests that
// run it as an operator would.
var builtIdem = struct {
	once sync.Once
	path string
	err  error
	out  []byte
}{}

// idemBinary returns the path of the built command.
func idemBinary(t *testing.T) string {
	t.Helper()
	builtIdem.once.Do(func() {
		dir, err := os.MkdirTemp("", "idem-bin-")
		if err != nil {
			builtIdem.err = err
			return
		}
		builtIdem.path = filepath.Join(dir, "idem")
		builtIdem.out, builtIdem.err = exec.Command("go", "build", "-o", builtIdem.path, ".").CombinedOutput()
	})
	require.NoError(t, builtIdem.err, "go build: %s", builtIdem.out)
	return builtIdem.path
}

// runBinary runs the built command with env added to the test's, and
// returns its exit status, stdout and stderr.
func runBinary(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(idemBinary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return code, stdout.String(), stderr.String()
}

// An operator on an encrypted store, through the built binary: a resolve
// without keys is refused, names -keys and $IDEM_KEYS, and leaves nothing
// of its body in any file of the directory; with -keys the result is
// sealed; -in-clear writes it in clear and the story says so; inspect and
// export without keys tell every record's story with its result marked
// sealed under k1.
func TestResolve_EncryptedStore_Binary(t *testing.T) {
	ctx := context.Background()
	keys := t.TempDir()
	k1 := writeKey(t, keys, "k1", 3)
	ring, err := loadKeys(ctx, k1)
	require.NoError(t, err)
	dir := filepath.Join(t.TempDir(), "store")
	s, err := idem.Open(dir, &idem.Options{Clock: idemtest.NewClock(scriptT0), SweepInterval: -1,
		CloseTimeout: time.Millisecond, Keys: ring})
	require.NoError(t, err)
	_, _, err = s.Do(ctx, idem.Request{Scope: "s", Key: "done-1", Fingerprint: "fp"},
		func(context.Context) (idem.Result, error) {
			return idem.Result{Status: 201, Body: []byte(secretMarker)}, nil
		})
	require.NoError(t, err)
	for _, k := range []string{"stuck-1", "stuck-2"} {
		_, _, err := s.Begin(ctx, idem.Request{Scope: "s", Key: k, Fingerprint: "fp"})
		require.NoError(t, err)
	}
	require.NoError(t, s.Close()) // the claims stay open, as after a kill

	const sealedBody, clearBody = "RESOLVED-a91e-4000111122223333", "INCLEAR-77d0-5555666677778888"
	bodyFile := func(content string) string {
		p := filepath.Join(t.TempDir(), "body.json")
		require.NoError(t, os.WriteFile(p, []byte(`{"refund":"`+content+`"}`), 0o600))
		return p
	}
	noKeys := []string{keysEnv + "="}
	now := scriptNow.Format(time.RFC3339)
	resolve := func(env []string, key, body string, more ...string) (int, string, string) {
		args := append([]string{"resolve", dir, "-scope", "s", key, "-committed", "-status", "201",
			"-body-file", bodyFile(body), "-note", "checked ledger", "-by", "alice", "-now", now}, more...)
		return runBinary(t, env, args...)
	}

	code, out, errOut := resolve(noKeys, "stuck-1", sealedBody)
	require.Equal(t, 1, code, "resolve without keys on an encrypted store: %s%s", out, errOut)
	for _, want := range []string{"encrypted", "-keys", "$IDEM_KEYS", "-in-clear"} {
		require.Contains(t, errOut, want)
	}
	found, read := storeDirLeaksOf(t, dir, sealedBody)
	require.Empty(t, found, "a refused resolve left its body in clear")
	require.Contains(t, read, "idem.wal", "the search read idem's log")
	require.True(t, slices.ContainsFunc(read, func(f string) bool {
		return strings.HasSuffix(f, ".sst") || strings.HasSuffix(f, ".vlog") || strings.HasSuffix(f, ".mem")
	}), "the search read Badger's files: %v", read)
	code, out, _ = runBinary(t, noKeys, "inspect", dir, "-scope", "s", "-now", now, "stuck-1")
	require.Equal(t, 0, code)
	require.Contains(t, out, "stuck", "the refused resolve changed nothing")

	code, out, errOut = resolve([]string{keysEnv + "=" + k1}, "stuck-1", sealedBody)
	require.Equal(t, 0, code, "%s%s", out, errOut)
	require.Contains(t, out, "settled by an operator: committed (alice: checked ledger)")
	found, _ = storeDirLeaksOf(t, dir, sealedBody)
	require.Empty(t, found, "with -keys the body is sealed")

	code, out, errOut = resolve(noKeys, "stuck-2", clearBody, "-in-clear")
	require.Equal(t, 0, code, "%s%s", out, errOut)
	require.Contains(t, out, "settled by an operator: committed, in clear (alice: checked ledger)")
	found, _ = storeDirLeaksOf(t, dir, clearBody)
	require.NotEmpty(t, found, "-in-clear stores the body in clear (and the search finds it)")

	// Every story reads without the key; sealed results are marked so.
	for _, key := range []string{"done-1", "stuck-1"} {
		code, out, errOut = runBinary(t, noKeys, "inspect", dir, "-scope", "s", "-now", now, key)
		require.Equal(t, 0, code, "inspect %s without keys: %s", key, errOut)
		require.Contains(t, out, `status 201, sealed under key "k1" (not given)`)
		require.Contains(t, out, "claim 1 of 1")
	}
	code, out, _ = runBinary(t, noKeys, "inspect", dir, "-scope", "s", "-now", now, "-json", "stuck-2")
	require.Equal(t, 0, code)
	require.NotContains(t, out, "sealed_under")
	code, out, errOut = runBinary(t, []string{keysEnv + "=" + k1}, "inspect", dir, "-scope", "s", "-now", now, "done-1")
	require.Equal(t, 0, code, errOut)
	require.NotContains(t, out, "sealed under", "with the key, the result is opened")

	code, out, errOut = runBinary(t, noKeys, "export", dir)
	require.Equal(t, 0, code, errOut)
	require.False(t, leaksOf([]byte(out), secretMarker) || leaksOf([]byte(out), sealedBody))
	require.Equal(t, 2, strings.Count(out, `"sealed_under":"k1"`), "done-1 and stuck-1:\n%s", out)
	require.Contains(t, out, `"scope":"`+idem.EncryptionScope+`"`)
}
