package idemtest

import (
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
