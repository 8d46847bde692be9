package engine

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/internal/badger"
	"github.com/idemkit/idem/internal/wal"
)

// ErrLowSpace is returned by Open, and by LowSpace, when the file system
// of the directory has less free space than Options.Reserve.
var ErrLowSpace = errors.New("engine: free space below the reserve")

// spaceRecheck is how often the free space is measured while it is well
// above the reserve; below four reserves it is measured at every call.
const spaceRecheck = 50 * time.Millisecond

// Reserve returns the free space a store opened with bo keeps for what its
// engine may allocate at once after claims are refused: the flushes,
// compactions, checkpoints and Close that go on, and the writes of claims
// already made. Every file Badger writes through a memory map has its
// blocks allocated before it is mapped or grown, so running out is an
// error (a failed write breaks the engine until a reopen), never SIGBUS;
// the reserve is what keeps it from coming to that. With M = MemTableSize
// and N = NumMemtables, it is the sum of:
//
//   - N*2M: the memtable logs (.mem, allocated in full at twice the
//     memtable's size) made while the flusher is behind, one for each
//     memtable that may wait for it;
//   - (N+1)*M: the level-0 tables of those memtables and of the active
//     one, each written before its log is removed;
//   - NumLevelZeroTablesStall*M + BaseLevelSize: the largest compaction,
//     level 0 at its stall into the whole base level, whose output is
//     written before its inputs are removed;
//   - (NumCompactors-1) * (LevelSizeMultiplier+1) * BaseTableSize: the
//     other compactors, each one table and the tables below it;
//   - 15% of M: one write's batch of values in the value log (Badger's
//     bound on a batch; value logs are allocated as they are written);
//   - wal.InitialSize: idem's log, written in full when an open creates
//     it (a checkpoint reuses it, and writes the mark of one block).
//
// With the default memory budget (M = 2 MiB, N = 2, 512 KiB tables, the
// stall at 16 tables, a 10 MiB base level, 2 compactors) it is about
// 70 MiB. In memory and read-only it is 0.
func Reserve(bo badger.Options) int64 {
	if bo.InMemory || bo.ReadOnly {
		return 0
	}
	m, n := bo.MemTableSize, int64(bo.NumMemtables)
	logs := n * 2 * m
	flushed := (n + 1) * m
	compaction := int64(bo.NumLevelZeroTablesStall)*m + bo.BaseLevelSize
	others := int64(max(bo.NumCompactors-1, 0)) * int64(bo.LevelSizeMultiplier+1) * bo.BaseTableSize
	batch := 15 * m / 100
	return logs + flushed + compaction + others + batch + wal.InitialSize
}

// spaceGuard watches the free space of the directory's file system.
type spaceGuard struct {
	reserve int64
	last    atomic.Int64 // unix nanos of the last measure
	free    atomic.Int64 // bytes free at the last measure
}

// LowSpace returns an error wrapping ErrLowSpace while the directory's
// file system has less free space than Options.Reserve: the caller then
// refuses new work, so that what is under way, Badger's flushes and
// compactions, the log's checkpoints and Close have room (see Reserve;
// without it they fail, and a failed write stops the engine's writing
// until a reopen). It returns nil in memory, read-only, or with no
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
