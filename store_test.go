package idem_test

import (
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
)

func TestBadger_Conformance_Disk(t *testing.T) {
	idemtest.TestBackend(t, func(t testing.TB) idem.Backend {
		b, err := idem.OpenBadger(t.TempDir(), idem.BadgerOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return b
	})
}

func TestBadger_Conformance_InMemory(t *testing.T) {
	idemtest.TestBackend(t, func(t testing.TB) idem.Backend {
		b, err := idem.OpenBadger("", idem.BadgerOptions{InMemory: true})
		if err != nil {
			t.Fatal(err)
		}
		return b
	})
}
