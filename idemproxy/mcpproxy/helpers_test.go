package mcpproxy_test

import (
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/badgerstore"
	"github.com/idemkit/idem/idemproxy"
)

// newStore opens an in-memory store as a proxy needs it (idemproxy.Policy
// and HoldResolver), without a background sweep, and closes it when the
// test ends.
func newStore(t testing.TB) *idem.Store {
	t.Helper()
	mem, err := badgerstore.Open("", badgerstore.Options{InMemory: true})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	s := idem.New(mem, &idem.Options{SweepInterval: -1, Policy: idemproxy.Policy, Resolver: idemproxy.HoldResolver{}})
	t.Cleanup(func() { _ = s.Close() })
	return s
}
