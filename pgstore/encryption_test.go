package pgstore_test

import (
	"bytes"
	"encoding/hex"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keyring"
	"github.com/stretchr/testify/require"
)

// TestEncryption_RowsHoldNoSecret stores results, a saved error, a settled
// result and a journal's arguments carrying a marker, then reads the
// table with a plain SELECT of every row as text: with a keyring the
// marker is nowhere; without one it is there, which shows the search finds
// it.
func TestEncryption_RowsHoldNoSecret(t *testing.T) {
	const marker = "MARKER-pg-5500000000000004"
	ring, err := keyring.New(keyring.Key{ID: "pg-1", Secret: bytes.Repeat([]byte{5}, keyring.KeySize)})
	require.NoError(t, err)
	p := pool(t)
	for _, keys := range []*keyring.Ring{ring, nil} {
		b := newBackend(t, p, nil)
		s := idem.New(b, &idem.Options{SweepInterval: -1, Keys: keys})
		n := idemtest.StoreSecrets(t, s, marker)
		require.NoError(t, s.Close())

		rows, err := p.Query(ctx, "SELECT t::text FROM "+b.Table()+" AS t")
		require.NoError(t, err)
		seen, found := 0, false
		for rows.Next() {
			var row string
			require.NoError(t, rows.Scan(&row))
			seen++
			// bytea columns print as hex: look for the marker in hex too.
			if bytes.Contains([]byte(row), []byte(marker)) || bytes.Contains([]byte(row), []byte(hex.EncodeToString([]byte(marker)))) {
				found = true
			}
		}
		require.NoError(t, rows.Err())
		if keys != nil {
			n++ // the store's encryption marker (idem.EncryptionScope)
		}
		require.Equal(t, n, seen)
		require.Equal(t, keys == nil, found, "keys %v: marker found %v", keys != nil, found)
	}
}
