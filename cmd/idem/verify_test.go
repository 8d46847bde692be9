package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/badger"
	"github.com/stretchr/testify/require"
)

// verifiedStore writes a few results into a new store and closes it.
func verifiedStore(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	s, err := idem.Open(dir, &idem.Options{SweepInterval: -1})
	require.NoError(t, err)
	for i := range 20 {
		_, _, err := s.Do(context.Background(), idem.Request{Key: fmt.Sprint("k", i)},
			func(context.Context) (idem.Result, error) { return idem.Result{Status: 200, Body: []byte("b")}, nil })
		require.NoError(t, err)
	}
	require.NoError(t, s.Close())
	return dir
}

func TestVerify(t *testing.T) {
	dir := verifiedStore(t)
	code, out, errOut := runIdem(t, "verify", dir)
	require.Equal(t, 0, code, "%s%s", out, errOut)
	require.Contains(t, out, "20 records")
	require.Contains(t, out, ": ok")

	code, out, _ = runIdem(t, "verify", "-json", "-dir", dir)
	require.Equal(t, 0, code)
	var res struct {
		OK      bool `json:"ok"`
		Records int  `json:"records"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	require.True(t, res.OK)
	require.Equal(t, 20, res.Records)

	// A record damaged behind the store's back.
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
	require.NoError(t, err)
	require.NoError(t, db.Update(func(txn *badger.Txn) error { return txn.Set([]byte("r\x00k3"), []byte{0x81, 0xa1}) }))
	require.NoError(t, db.Close())
	code, out, errOut = runIdem(t, "verify", dir)
	require.Equal(t, 1, code, "%s%s", out, errOut)
	require.Contains(t, out, `damaged: record of scope "", key "k3"`)
	require.Contains(t, out, "1 damaged")

	// A store that cannot be opened is damage too.
	require.NoError(t, os.Remove(filepath.Join(dir, "idem.wal")))
	code, out, _ = runIdem(t, "verify", "--json", dir)
	require.Equal(t, 1, code)
	require.True(t, strings.Contains(out, `"open_error"`) && strings.Contains(out, "idem.wal is missing"), out)

	code, _, _ = runIdem(t, "verify")
	require.Equal(t, 2, code, "no directory is a usage error")
}
