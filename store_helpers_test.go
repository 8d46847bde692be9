package idem_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/badgerstore"
	"github.com/idemkit/idem/idemtest"
	"github.com/stretchr/testify/require"
)

var bg = context.Background()

// openStore opens a store in dir (in memory for "") with a fake clock and
// no background sweep, closing it when the test ends.
func openStore(t testing.TB, dir string, o *idem.Options) *idem.Store {
	t.Helper()
	return openStoreWith(t, dir, o, badgerstore.Options{InMemory: dir == ""})
}

// openStoreWith is openStore on an embedded backend tuned by bo.
func openStoreWith(t testing.TB, dir string, o *idem.Options, bo badgerstore.Options) *idem.Store {
	t.Helper()
	if o == nil {
		o = &idem.Options{}
	}
	if o.Clock == nil {
		o.Clock = idemtest.NewClock(time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC))
	}
	if o.SweepInterval == 0 {
		o.SweepInterval = -1
	}
	if o.CloseTimeout == 0 {
		o.CloseTimeout = time.Millisecond // tests leave claims open on purpose
	}
	s, err := idemtest.OpenBadger(dir, o, bo)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}
