package pgstore_test

import (
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
)

// TestConformance runs the whole conformance suite against PostgreSQL: every
// backend of a test gets a table of its own.
func TestConformance(t *testing.T) {
	p := pool(t)
	idemtest.TestBackend(t, func(t testing.TB) idem.Backend {
		return newBackend(t, p, nil)
	})
}
