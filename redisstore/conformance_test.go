package redisstore_test

import (
	"testing"

	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/idemtest"
)

// TestConformance runs the whole conformance suite against redis-server
// with appendfsync always: every backend a test asks for gets a prefix of
// its own.
func TestConformance(t *testing.T) {
	c := client(t)
	idemtest.TestBackend(t, func(t testing.TB) backend.Backend {
		return newBackend(t, c, nil)
	})
}
