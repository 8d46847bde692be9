package badgerstore_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/badgerstore"
	"github.com/idemkit/idem/internal/badger"
	"github.com/stretchr/testify/require"
)

func TestStore_Verify(t *testing.T) {
	dir := t.TempDir()
	b, err := badgerstore.Open(dir, badgerstore.Options{})
	require.NoError(t, err)
	s := idem.New(b, &idem.Options{SweepInterval: -1})
	t.Cleanup(func() { _ = s.Close() })
	for i := range 50 {
		_, _, err := s.Do(bg, idem.Request{Key: fmt.Sprint(i)}, ok(string(faultBody(i))))
		require.NoError(t, err)
	}
	r, err := s.Verify(bg)
	require.NoError(t, err)
	require.True(t, r.OK(), "%v", r.Damage)
	require.Equal(t, 50, r.Records)
	require.Positive(t, r.Expiries)

	// A record that fails its checksum, and one stored under another key.
	var good []byte
	require.NoError(t, badgerstore.BadgerDB(b).Update(func(txn *badger.Txn) error {
		item, err := txn.Get([]byte("r\x001"))
		if err != nil {
			return err
		}
		if good, err = item.ValueCopy(nil); err != nil {
			return err
		}
		bad := append([]byte(nil), good...)
		bad[len(bad)/2] ^= 1
		if err := txn.Set([]byte("r\x002"), bad); err != nil {
			return err
		}
		return txn.Set([]byte("r\x003"), good)
	}))
	r, err = s.Verify(bg)
	require.NoError(t, err)
	require.Len(t, r.Damage, 2, "%v", r.Damage)
	require.Equal(t, "2", r.Damage[0].Key)
	require.Contains(t, r.Damage[0].Problem, "corrupt record")
	require.Equal(t, "3", r.Damage[1].Key)
	require.Contains(t, r.Damage[1].String(), `holds the record of scope "", key "1"`)

	// The damaged record is refused, its effect not run again (by a new
	// store: this one's replay cache still holds the result).
	require.NoError(t, s.Close())
	s = openStore(t, dir, &idem.Options{Clock: idem.SystemClock()})
	_, _, err = s.Do(bg, idem.Request{Key: "2"}, func(context.Context) (backend.Result, error) {
		t.Error("the effect of a damaged record ran again")
		return backend.Result{}, nil
	})
	require.ErrorIs(t, err, backend.ErrCorrupt)
	require.ErrorContains(t, err, `key "2"`)
}

// plainBackend hides every method of its Backend but the Backend's own.
type plainBackend struct{ backend.Backend }

func TestStore_Verify_NotSupported(t *testing.T) {
	b, err := badgerstore.Open(t.TempDir(), badgerstore.Options{})
	require.NoError(t, err)
	s := idem.New(plainBackend{b}, &idem.Options{SweepInterval: -1})
	t.Cleanup(func() { _ = s.Close() })
	_, err = s.Verify(bg)
	require.ErrorIs(t, err, idem.ErrNoVerify)
}
