package engine

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// ErrLowSpace is returned by Open, and by LowSpace, when the file system
// of the directory has less free space than Options.Reserve.
var ErrLowSpace = errors.New("engine: free space below the reserve")

// spaceRecheck is how often the free space is measured while it is well
// above the reserve; below four reserves it is measured at every call.
const spaceRecheck = 50 * time.Millisecond

// spaceGuard watches the free space of the directory's file system.
type spaceGuard struct {
	reserve int64
	last    atomic.Int64 // unix nanos of the last measure
	free    atomic.Int64 // bytes free at the last measure
}

// LowSpace returns an error wrapping ErrLowSpace while the directory's
// file system has less free space than Options.Reserve: the caller then
// refuses new work, so that what is under way, Badger's flushes and
// compactions, the log's checkpoints and Close have room (a write into
// one of Badger's memory-mapped files on a full file system kills the
// process with SIGBUS). It returns nil in memory, read-only, or with no
// reserve, and where the free space cannot be measured.
func (e *Engine) LowSpace() error {
	g := &e.space
	if g.reserve <= 0 || e.ro || e.db.Opts().InMemory {
		return nil
	}
	now := time.Now().UnixNano()
	free := g.free.Load()
	if free > 4*g.reserve && now-g.last.Load() < int64(spaceRecheck) {
		return nil
	}
	f, ok := freeSpace(e.dir)
	if !ok {
		return nil
	}
	g.free.Store(f)
	g.last.Store(now)
	return lowSpaceErr(f, g.reserve)
}

func lowSpaceErr(free, reserve int64) error {
	if free >= reserve {
		return nil
	}
	return fmt.Errorf("%w: %d MiB free, %d MiB kept for flushes, compactions, checkpoints and close", ErrLowSpace, free>>20, reserve>>20)
}
