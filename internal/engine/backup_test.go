package engine

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/internal/badger"
	"github.com/stretchr/testify/require"
)

// TestBackup_HoldsAnsweredWritesBadgerLacks checks the cut: a write
// answered (in the log) while the applier has not yet committed it to
// Badger is in a backup begun afterwards.
func TestBackup_HoldsAnsweredWritesBadgerLacks(t *testing.T) {
	var hold atomic.Bool
	held, release := make(chan struct{}, 1), make(chan struct{})
	e := openEngine(t, t.TempDir(), Options{Durable: true, BeforeApply: func(uint64) {
		if hold.Load() {
			held <- struct{}{}
			<-release
		}
	}})
	put(t, e, "before", "in Badger")
	hold.Store(true)
	put(t, e, "k", "answered")

	// The applier may not have been woken for lone units yet; the
	// backup's settle wakes it, and it is held before its first commit.
	var stream bytes.Buffer
	done := make(chan error, 1)
	go func() {
		_, err := e.Backup(context.Background(), &stream)
		done <- err
	}()
	<-held // answered, and Badger does not hold it
	require.ErrorIs(t, e.DB().View(func(txn *badger.Txn) error { _, err := txn.Get([]byte("k")); return err }),
		badger.ErrKeyNotFound)
	hold.Store(false)
	close(release)
	require.NoError(t, <-done)

	db, err := badger.Open(badger.DefaultOptions("").WithInMemory(true).WithLogger(nil))
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, db.Load(&stream, 4))
	for k, want := range map[string]string{"before": "in Badger", "k": "answered"} {
		require.NoError(t, db.View(func(txn *badger.Txn) error {
			item, err := txn.Get([]byte(k))
			if err != nil {
				return err
			}
			v, err := item.ValueCopy(nil)
			require.Equal(t, want, string(v))
			return err
		}), k)
	}
	require.NotEmpty(t, e.StoreID())
}

func TestRestore_RefusesNonEmptyDir(t *testing.T) {
	dir := t.TempDir()
	openEngine(t, dir, Options{Durable: true}).Close()
	err := Restore(badger.DefaultOptions(dir).WithLogger(nil), bytes.NewReader(nil))
	require.ErrorIs(t, err, ErrNotEmpty)
	e, err := Open(Options{Badger: badger.DefaultOptions(dir).WithLogger(nil), Durable: true})
	require.NoError(t, err, "the store refused is untouched")
	require.NoError(t, e.Close())
}
