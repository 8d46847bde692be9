package badgerstore_test

import (
	"testing"

	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/badgerstore"
	"github.com/idemkit/idem/idemtest"
)

// onDisk and inMemory return a fresh backend for one conformance case.
func onDisk(t testing.TB) backend.Backend { return open(t, t.TempDir(), badgerstore.Options{}) }

func inMemory(t testing.TB) backend.Backend {
	return open(t, "", badgerstore.Options{InMemory: true})
}

func open(t testing.TB, dir string, o badgerstore.Options) backend.Backend {
	b, err := badgerstore.Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestBadger_Conformance_Disk(t *testing.T) { idemtest.TestBackend(t, onDisk) }

func TestBadger_Conformance_InMemory(t *testing.T) { idemtest.TestBackend(t, inMemory) }

// The suite again with results encrypted by the Store (Options.Keys).
func TestBadger_Conformance_DiskEncrypted(t *testing.T) { idemtest.TestBackendEncrypted(t, onDisk) }

func TestBadger_Conformance_InMemoryEncrypted(t *testing.T) {
	idemtest.TestBackendEncrypted(t, inMemory)
}
