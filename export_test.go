package idem

import "github.com/dgraph-io/badger/v4"

// BadgerDB returns the Badger database under b, for external tests that
// look at or damage what is stored. Writes through it bypass idem's log.
func BadgerDB(b *BadgerBackend) *badger.DB { return b.eng.DB() }
