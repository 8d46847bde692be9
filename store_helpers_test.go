package idem_test

import (
	"context"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/badgerstore"
	"github.com/idemkit/idem/idemtest"
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
	return idemtest.NewStore(t, dir, o, bo)
}
