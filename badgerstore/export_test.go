package badgerstore

import "github.com/idemkit/idem/internal/badger"

// BadgerDB returns the Badger database under b, for external tests that
// look at or damage what is stored. Writes through it bypass idem's log.
func BadgerDB(b *Backend) *badger.DB { return b.eng.DB() }

// TuneBadger makes o change any engine option last: tests reach settings
// no user needs (tiny value-log files, older table formats, no compactor).
func TuneBadger(o Options, f func(*badger.Options)) Options {
	o.tune = f
	return o
}

// SetTokenBlock sets how many tokens one write of the counter reserves,
// for a test process that crosses blocks often; it is not safe while a
// store is open.
func SetTokenBlock(n uint64) { tokenBlock = n }
