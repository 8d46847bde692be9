package idem_test

import (
	"strconv"
	"testing"

	"github.com/idemkit/idem"
	"github.com/stretchr/testify/require"
)

// Replays of more keys than one Badger transaction holds are still
// counted: the counts are handed over in chunks, not in one write that
// Badger refuses as too big.
func TestStore_Sweep_CountsReplaysOfManyKeys(t *testing.T) {
	s := openStore(t, t.TempDir(), &idem.Options{Durability: idem.Fast})
	const keys = 4000
	for i := range keys {
		_, _, err := s.Do(bg, idem.Request{Key: "k" + strconv.Itoa(i)}, ok(`{"refund":"re_123","status":"succeeded"}`))
		require.NoError(t, err)
	}
	for i := range keys {
		_, res, err := s.Begin(bg, idem.Request{Key: "k" + strconv.Itoa(i)})
		require.NoError(t, err)
		require.NotNil(t, res)
	}
	_, err := s.Sweep(bg)
	require.NoError(t, err)
	for _, i := range []int{0, keys / 2, keys - 1} {
		rec, err := s.Get(bg, "", "k"+strconv.Itoa(i))
		require.NoError(t, err)
		require.Equal(t, int64(1), rec.Replays, rec.Key)
	}
}
