package badgerstore_test

import (
	"testing"

	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/badgerstore"
	"github.com/idemkit/idem/idemtest"
)

func TestBadger_Conformance_Disk(t *testing.T) {
	idemtest.TestBackend(t, func(t testing.TB) backend.Backend {
		b, err := badgerstore.Open(t.TempDir(), badgerstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return b
	})
}

func TestBadger_Conformance_InMemory(t *testing.T) {
	idemtest.TestBackend(t, func(t testing.TB) backend.Backend {
		b, err := badgerstore.Open("", badgerstore.Options{InMemory: true})
		if err != nil {
			t.Fatal(err)
		}
		return b
	})
}
