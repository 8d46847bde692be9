package engine

import (
	"context"
	"errors"

	"github.com/idemkit/idem/internal/badger"
)

// gcHoldPrefix is a prefix no key has: the iterator that holds back the
// deletion of value-log files reads nothing.
const gcHoldPrefix = "\xff\xffidem/vlog-gc-hold"

// ValueLogGC runs Badger's value-log garbage collection up to rounds
// times, with Badger's discard ratio, and makes what it rewrote durable
// before the value-log files it emptied are deleted. It returns how many
// files were rewritten.
//
// Badger's GC writes the live values of a file back through its write
// path (unsynced: SyncWrites is off, and idem's log never sees these
// writes) and then deletes the file at once, unless an iterator is open,
// in which case the deletion waits until the last one closes. So this
// holds an iterator open across the GC, syncs Badger's files (as a
// checkpoint does) and only then closes it. Without that, a power cut
// after the deletion reached the disk and before the next checkpoint
// would leave tables pointing into a deleted file. docs/engine.md,
// "Value-log garbage collection".
func (e *Engine) ValueLogGC(ctx context.Context, ratio float64, rounds int) (int, error) {
	if e.ro || e.db.Opts().InMemory {
		return 0, nil
	}
	hold := e.db.NewTransaction(false)
	it := hold.NewIterator(badger.IteratorOptions{Prefix: []byte(gcHoldPrefix)})
	n := 0
	var err error
	for ; n < rounds && ctx.Err() == nil; n++ {
		if err = e.db.RunValueLogGC(ratio); err != nil {
			break
		}
	}
	if errors.Is(err, badger.ErrNoRewrite) || errors.Is(err, badger.ErrRejected) {
		err = nil
	}
	if n > 0 {
		if serr := syncBadgerFiles(e.db, e.dir); serr != nil {
			// The rewrites may not be on the disk: the files they came
			// from must stay. The iterator is left open, so this process
			// never deletes them (the next open finds them again), and
			// writing stops until a reopen, as after a failed checkpoint.
			return n, e.breakWith(errors.Join(err, serr))
		}
	}
	it.Close() // the deletion of the rewritten files, now that their values are durable
	hold.Discard()
	return n, err
}
