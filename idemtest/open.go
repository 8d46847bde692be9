package idemtest

import (
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/badgerstore"
)

// OpenBadger opens a Store on the embedded backend tuned by bo, as
// idem.Open does with bo's defaults: Options' Durability, MemoryBudget
// and Logger fill the fields bo leaves zero. With bo.InMemory the store
// lives in memory and dir is ignored: the usual store of a test.
func OpenBadger(dir string, opts *idem.Options, bo badgerstore.Options) (*idem.Store, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts != nil {
		if bo.Durability == backend.Durable {
			bo.Durability = opts.Durability
		}
		if bo.MemoryBudget == 0 {
			bo.MemoryBudget = opts.MemoryBudget
		}
		if bo.Logger == nil {
			bo.Logger = opts.Logger
		}
	}
	b, err := badgerstore.Open(dir, bo)
	if err != nil {
		return nil, err
	}
	return idem.New(b, opts), nil
}

// NewStore is OpenBadger for a test: unless o sets them, the Store runs on
// a fake Clock at 2026-05-01 00:00 UTC, with no background sweep and a
// millisecond CloseTimeout (tests leave claims open on purpose). It fails
// t if the store does not open, and closes it when t ends.
func NewStore(t testing.TB, dir string, o *idem.Options, bo badgerstore.Options) *idem.Store {
	t.Helper()
	if o == nil {
		o = &idem.Options{}
	}
	if o.Clock == nil {
		o.Clock = NewClock(time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC))
	}
	if o.SweepInterval == 0 {
		o.SweepInterval = -1
	}
	if o.CloseTimeout == 0 {
		o.CloseTimeout = time.Millisecond
	}
	s, err := OpenBadger(dir, o, bo)
	if err != nil {
		t.Fatalf("idemtest: open a store in %q: %v", dir, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}
