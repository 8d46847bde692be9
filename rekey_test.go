package idem_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/badgerstore"
	"github.com/idemkit/idem/keyring"
	"github.com/stretchr/testify/require"
)

func testKey(id string, b byte) keyring.Key {
	return keyring.Key{ID: id, Secret: bytes.Repeat([]byte{b}, keyring.KeySize)}
}

func newRing(t testing.TB, active keyring.Key, older ...keyring.Key) *keyring.Ring {
	t.Helper()
	r, err := keyring.New(active, older...)
	require.NoError(t, err)
	return r
}

// stopAfter is the Badger backend, whose Reseal cancels a context once it
// wrote n results: a Rekey interrupted part way.
type stopAfter struct {
	*badgerstore.Backend
	n      int
	cancel context.CancelFunc
}

func (s *stopAfter) Reseal(ctx context.Context, scope, key string, token uint64, res backend.Result) error {
	err := s.Backend.Reseal(ctx, scope, key, token, res)
	if s.n--; s.n == 0 {
		s.cancel()
	}
	return err
}

// reopen opens the store in dir over b's wrapper when stop is set.
func reopen(t *testing.T, dir string, keys *keyring.Ring, stop *stopAfter) *idem.Store {
	t.Helper()
	b, err := badgerstore.Open(dir, badgerstore.Options{})
	require.NoError(t, err)
	var be backend.Backend = b
	if stop != nil {
		stop.Backend = b
		be = stop
	}
	return idem.New(be, &idem.Options{SweepInterval: -1, Keys: keys})
}

func saveN(t *testing.T, s *idem.Store, prefix string, n int) {
	t.Helper()
	for i := range n {
		k := fmt.Sprintf("%s-%d", prefix, i)
		c, _, err := s.Begin(bg, idem.Request{Scope: "t", Key: k, Fingerprint: "fp"})
		require.NoError(t, err)
		require.NoError(t, c.Complete(bg, idem.Result{Status: 200, Body: []byte("body of " + k)}))
	}
}

// replaysAll requires every key of saveN to replay its result under s.
func replaysAll(t *testing.T, s *idem.Store, prefix string, n int) {
	t.Helper()
	for i := range n {
		k := fmt.Sprintf("%s-%d", prefix, i)
		c, res, err := s.Begin(bg, idem.Request{Scope: "t", Key: k, Fingerprint: "fp"})
		require.NoError(t, err, k)
		require.Nil(t, c, "%s claimed again", k)
		require.Equal(t, "body of "+k, string(res.Body))
	}
}

// Rekey seals every result again under the active key: those of the old
// key and those written before encryption. Stopped part way, a new run
// does the rest; after it the old key can leave the ring.
func TestStore_Rekey_InterruptedAndRerun(t *testing.T) {
	dir := t.TempDir()
	a, b := testKey("a", 1), testKey("b", 2)

	s := reopen(t, dir, nil, nil)
	saveN(t, s, "plain", 3)
	require.NoError(t, s.Close())
	s = reopen(t, dir, newRing(t, a), nil)
	saveN(t, s, "a", 7)
	require.NoError(t, s.Close())

	// Rotation: b is active, a still read.
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	s = reopen(t, dir, newRing(t, b, a), &stopAfter{n: 4, cancel: cancel})
	replaysAll(t, s, "a", 7)
	r, err := s.Rekey(ctx)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 4, r.Rekeyed)
	require.NoError(t, s.Close())

	s = reopen(t, dir, newRing(t, b, a), nil)
	r, err = s.Rekey(bg)
	require.NoError(t, err)
	require.Equal(t, idem.RekeyReport{Scanned: 10, Rekeyed: 6, Current: 4}, *r)
	r, err = s.Rekey(bg)
	require.NoError(t, err)
	require.Equal(t, idem.RekeyReport{Scanned: 10, Current: 10}, *r, "a second run has nothing to do")
	require.NoError(t, s.Close())

	// Without a: everything reads.
	s = reopen(t, dir, newRing(t, b), nil)
	replaysAll(t, s, "a", 7)
	replaysAll(t, s, "plain", 3)
	require.NoError(t, s.Close())

	// With a only: every record is missing its key, and held, never run.
	s = reopen(t, dir, newRing(t, a), nil)
	_, _, err = s.Do(bg, idem.Request{Scope: "t", Key: "a-1", Fingerprint: "fp"}, func(context.Context) (idem.Result, error) {
		t.Error("ran again")
		return idem.Result{}, nil
	})
	var mk *idem.MissingKeyError
	require.ErrorAs(t, err, &mk)
	require.Equal(t, "b", mk.KeyID)
	r, err = s.Rekey(bg)
	require.NoError(t, err)
	require.Equal(t, idem.RekeyReport{Scanned: 10, Missing: 10, MissingKeys: []string{"b"}}, *r)
	require.NoError(t, s.Close())

	s = reopen(t, dir, nil, nil)
	_, err = s.Rekey(bg)
	require.ErrorIs(t, err, idem.ErrNoRekey)
	require.NoError(t, s.Close())
}
