/*
 * SPDX-FileCopyrightText: © 2017-2025 Istari Digital, Inc.
 * SPDX-License-Identifier: Apache-2.0
 */

package badger

import (
	"bytes"
	"fmt"
	"sort"
	"sync"

	"github.com/idemkit/idem/internal/badger/table"
	"github.com/idemkit/idem/internal/badger/y"
)

type levelHandler struct {
	// Guards tables, totalSize.
	sync.RWMutex

	// For level >= 1, tables are sorted by key ranges, which do not overlap.
	// For level 0, tables are sorted by time.
	// For level 0, newest table are at the back. Compact the oldest one first, which is at the front.
	tables         []*table.Table
	totalSize      int64
	totalStaleSize int64

	// For level >= 1, tableCommon is the prefix every table's biggest user
	// key shares and tableWords[i] the next eight bytes of tables[i]'s, as
	// a big-endian word (reindexLocked): searchTables compares them in
	// memory instead of each table's key. They describe tables only when
	// len(tableWords) == len(tables).
	tableCommon []byte
	tableWords  []uint64

	// l0stall is a condition variable used to signal the (single) flush goroutine
	// waiting in addLevel0Table that the L0 table count has dropped below the stall
	// threshold (or that the DB is closing). It is only used for level 0 and its
	// Locker is this handler's write lock (see RWMutex above), so the stall
	// predicate (len(tables) >= NumLevelZeroTablesStall) is always evaluated and
	// the wait is entered atomically under the same lock that compaction uses to
	// remove L0 tables. This eliminates lost wakeups without a second mutex.
	l0stall *sync.Cond

	// The following are initialized once and const.
	level    int
	strLevel string
	db       *DB
}

func (s *levelHandler) isLastLevel() bool {
	return s.level == s.db.opt.MaxLevels-1
}

func (s *levelHandler) getTotalStaleSize() int64 {
	s.RLock()
	defer s.RUnlock()
	return s.totalStaleSize
}

func (s *levelHandler) getTotalSize() int64 {
	s.RLock()
	defer s.RUnlock()
	return s.totalSize
}

// initTables replaces s.tables with given tables. This is done during loading.
func (s *levelHandler) initTables(tables []*table.Table) {
	s.Lock()
	defer s.Unlock()

	s.tables = tables
	s.totalSize = 0
	s.totalStaleSize = 0
	for _, t := range tables {
		s.addSize(t)
	}

	if s.level == 0 {
		// Key range will overlap. Just sort by fileID in ascending order
		// because newer tables are at the end of level 0.
		sort.Slice(s.tables, func(i, j int) bool {
			return s.tables[i].ID() < s.tables[j].ID()
		})
	} else {
		// Sort tables by keys.
		sort.Slice(s.tables, func(i, j int) bool {
			return y.CompareKeys(s.tables[i].Smallest(), s.tables[j].Smallest()) < 0
		})
	}
	s.reindexLocked()
}

// deleteTables remove tables idx0, ..., idx1-1.
func (s *levelHandler) deleteTables(toDel []*table.Table) error {
	s.Lock() // s.Unlock() below

	toDelMap := make(map[uint64]struct{})
	for _, t := range toDel {
		toDelMap[t.ID()] = struct{}{}
	}

	// Make a copy as iterators might be keeping a slice of tables.
	var newTables []*table.Table
	for _, t := range s.tables {
		_, found := toDelMap[t.ID()]
		if !found {
			newTables = append(newTables, t)
			continue
		}
		s.subtractSize(t)
	}
	s.tables = newTables
	s.reindexLocked()

	s.Unlock() // Unlock s _before_ we DecrRef our tables, which can be slow.

	return decrRefs(toDel)
}

// replaceTables will replace tables[left:right] with newTables. Note this EXCLUDES tables[right].
// You must call decr() to delete the old tables _after_ writing the update to the manifest.
func (s *levelHandler) replaceTables(toDel, toAdd []*table.Table) error {
	// Need to re-search the range of tables in this level to be replaced as other goroutines might
	// be changing it as well.  (They can't touch our tables, but if they add/remove other tables,
	// the indices get shifted around.)
	s.Lock() // We s.Unlock() below.

	toDelMap := make(map[uint64]struct{})
	for _, t := range toDel {
		toDelMap[t.ID()] = struct{}{}
	}
	var newTables []*table.Table
	for _, t := range s.tables {
		_, found := toDelMap[t.ID()]
		if !found {
			newTables = append(newTables, t)
			continue
		}
		s.subtractSize(t)
	}

	// Increase totalSize first.
	for _, t := range toAdd {
		s.addSize(t)
		t.IncrRef()
		newTables = append(newTables, t)
	}

	// Assign tables.
	s.tables = newTables
	sort.Slice(s.tables, func(i, j int) bool {
		return y.CompareKeys(s.tables[i].Smallest(), s.tables[j].Smallest()) < 0
	})
	s.reindexLocked()
	s.Unlock() // s.Unlock before we DecrRef tables -- that can be slow.
	return decrRefs(toDel)
}

// addTable adds toAdd table to levelHandler. Normally when we add tables to levelHandler, we sort
// tables based on table.Smallest. This is required for correctness of the system. But in case of
// stream writer this can be avoided. We can just add tables to levelHandler's table list
// and after all addTable calls, we can sort table list(check sortTable method).
// NOTE: levelHandler.sortTables() should be called after call addTable calls are done.
func (s *levelHandler) addTable(t *table.Table) {
	s.Lock()
	defer s.Unlock()

	s.addSize(t) // Increase totalSize first.
	t.IncrRef()
	s.tables = append(s.tables, t)
	s.tableWords = nil // until sortTables
}

// sortTables sorts tables of levelHandler based on table.Smallest.
// Normally it should be called after all addTable calls.
func (s *levelHandler) sortTables() {
	s.Lock()
	defer s.Unlock()

	sort.Slice(s.tables, func(i, j int) bool {
		return y.CompareKeys(s.tables[i].Smallest(), s.tables[j].Smallest()) < 0
	})
	s.reindexLocked()
}

func decrRefs(tables []*table.Table) error {
	for _, table := range tables {
		if err := table.DecrRef(); err != nil {
			return err
		}
	}
	return nil
}

func newLevelHandler(db *DB, level int) *levelHandler {
	s := &levelHandler{
		level:    level,
		strLevel: fmt.Sprintf("l%d", level),
		db:       db,
	}
	if level == 0 {
		// The cond's Locker is the handler's write lock (RWMutex.Lock/Unlock).
		s.l0stall = sync.NewCond(&s.RWMutex)
	}
	return s
}

// signalL0Drained wakes any flush goroutine waiting in addLevel0Table. It must be
// called whenever the number of L0 tables may have decreased (e.g. after an
// L0->Lbase or L0->L0 compaction removes tables) or when the DB is closing. The
// waiter re-checks the stall predicate under the lock in a loop, so it is safe to
// Broadcast without holding the lock and without the count having actually changed
// (spurious broadcasts are harmless).
func (s *levelHandler) signalL0Drained() {
	if s.l0stall != nil {
		s.l0stall.Broadcast()
	}
}

// numTablesLocked returns the number of tables. Caller must hold s.Lock() (write
// lock), which is the same lock used as the l0stall cond's Locker.
func (s *levelHandler) numTablesLocked() int {
	return len(s.tables)
}

// addLevel0TableLocked appends t to L0 unconditionally. Caller must hold s.Lock()
// and must have asserted s.level == 0. This is the lock-held variant of the body
// of tryAddLevel0Table, used by addLevel0Table which already holds the lock to
// wait on the stall cond.
func (s *levelHandler) addLevel0TableLocked(t *table.Table) {
	s.tables = append(s.tables, t)
	t.IncrRef()
	s.addSize(t)
}

// tryAddLevel0Table returns true if ok and no stalling.
func (s *levelHandler) tryAddLevel0Table(t *table.Table) bool {
	y.AssertTrue(s.level == 0)
	// Need lock as we may be deleting the first table during a level 0 compaction.
	s.Lock()
	defer s.Unlock()
	// Stall (by returning false) if we are above the specified stall setting for L0.
	if len(s.tables) >= s.db.opt.NumLevelZeroTablesStall {
		return false
	}

	s.tables = append(s.tables, t)
	t.IncrRef()
	s.addSize(t)

	return true
}

// This should be called while holding the lock on the level.
func (s *levelHandler) addSize(t *table.Table) {
	s.totalSize += t.Size()
	s.totalStaleSize += int64(t.StaleDataSize())
}

// This should be called while holding the lock on the level.
func (s *levelHandler) subtractSize(t *table.Table) {
	s.totalSize -= t.Size()
	s.totalStaleSize -= int64(t.StaleDataSize())
}
func (s *levelHandler) numTables() int {
	s.RLock()
	defer s.RUnlock()
	return len(s.tables)
}

func (s *levelHandler) close() error {
	s.RLock()
	defer s.RUnlock()
	var err error
	for _, t := range s.tables {
		if closeErr := t.Close(-1); closeErr != nil && err == nil {
			err = closeErr
		}
	}
	return y.Wrap(err, "levelHandler.close")
}

// getTableForKey acquires a read-lock to access s.tables. It returns a list of tableHandlers.
func (s *levelHandler) getTableForKey(key []byte) ([]*table.Table, func() error) {
	out := s.appendTablesForKey(nil, key)
	return out, func() error { return decrTables(out) }
}

// appendTablesForKey appends to dst the tables of the level that may hold
// key, with a reference taken on each, and returns the extended slice:
// every table of level 0, newest first (a copy, since s.tables may change
// once the lock is released and seeking must not hold it), or the one
// table of a higher level whose range covers key. A point read passes a
// small array of its own, so that finding the tables allocates nothing.
func (s *levelHandler) appendTablesForKey(dst []*table.Table, key []byte) []*table.Table {
	s.RLock()
	defer s.RUnlock()

	if s.level == 0 {
		// CAUTION: Reverse the tables.
		for i := len(s.tables) - 1; i >= 0; i-- {
			dst = append(dst, s.tables[i])
			s.tables[i].IncrRef()
		}
		return dst
	}
	// For level >= 1, we can do a binary search as key range does not overlap.
	idx := s.searchTables(key)
	if idx >= len(s.tables) {
		// Given key is strictly > than every element we have.
		return dst
	}
	tbl := s.tables[idx]
	tbl.IncrRef()
	return append(dst, tbl)
}

// mayHold reports whether a table of the level may hold a version of the
// user key key, whose y.Hash is hash: one whose range covers it and whose
// Bloom filter does not rule it out. seek is key with the highest
// timestamp (y.KeyWithTs(key, math.MaxUint64)). The level's lock keeps its
// tables open while their filters are read.
func (s *levelHandler) mayHold(key, seek []byte, hash uint32) bool {
	s.RLock()
	defer s.RUnlock()
	if s.level == 0 {
		for _, t := range s.tables {
			if coversKey(t, key) && !t.DoesNotHave(hash) {
				return true
			}
		}
		return false
	}
	idx := s.searchTables(seek)
	if idx >= len(s.tables) {
		return false
	}
	t := s.tables[idx]
	return coversKey(t, key) && !t.DoesNotHave(hash)
}

// coversKey reports whether the user key key is within t's range.
func coversKey(t *table.Table, key []byte) bool {
	return bytes.Compare(y.ParseKey(t.Smallest()), key) <= 0 && bytes.Compare(key, y.ParseKey(t.Biggest())) <= 0
}

// decrTables releases the references appendTablesForKey took, all of
// them, and returns the first error.
func decrTables(tables []*table.Table) error {
	var err error
	for _, t := range tables {
		if e := t.DecrRef(); e != nil && err == nil {
			err = e
		}
	}
	return err
}

// get returns value for a given key or the key after that. If not found, return nil.
func (s *levelHandler) get(key []byte) (y.ValueStruct, error) {
	var buf [8]*table.Table
	tables := s.appendTablesForKey(buf[:0], key)
	keyNoTs := y.ParseKey(key)

	hash := y.Hash(keyNoTs)
	var maxVs y.ValueStruct
	for _, th := range tables {
		if th.DoesNotHave(hash) {
			y.NumLSMBloomHitsAdd(s.db.opt.MetricsEnabled, s.strLevel, 1)
			continue
		}
		y.NumLSMGetsAdd(s.db.opt.MetricsEnabled, s.strLevel, 1)
		if vs, ok := seekVersion(th, key, maxVs.Version); ok {
			maxVs = vs
		}
	}
	return maxVs, decrTables(tables)
}

// seekVersion returns a copy of the value of key's newest version at or
// below key's timestamp in t, if t holds one newer than above. The iterator is closed
// before it returns (a deferred Close in get's loop kept every iterator
// open to the end and cost a heap-allocated defer each).
func seekVersion(t *table.Table, key []byte, above uint64) (y.ValueStruct, bool) {
	it := t.NewIterator(0)
	defer it.Close()
	it.Seek(key)
	if !it.Valid() || !y.SameKey(key, it.Key()) {
		return y.ValueStruct{}, false
	}
	version := y.ParseTs(it.Key())
	if version <= above {
		return y.ValueStruct{}, false
	}
	vs := it.ValueCopy()
	vs.Version = version
	return vs, true
}

// appendIterators appends iterators to an array of iterators, for merging.
// Note: This obtains references for the table handlers. Remember to close these iterators.
func (s *levelHandler) appendIterators(iters []y.Iterator, opt *IteratorOptions) []y.Iterator {
	s.RLock()
	defer s.RUnlock()

	var topt int
	if opt.Reverse {
		topt = table.REVERSED
	}
	if s.level == 0 {
		// Remember to add in reverse order!
		// The newer table at the end of s.tables should be added first as it takes precedence.
		// Level 0 tables are not in key sorted order, so we need to consider them one by one.
		var out []*table.Table
		for _, t := range s.tables {
			if opt.pickTable(t) {
				out = append(out, t)
			}
		}
		return appendIteratorsReversed(iters, out, topt)
	}

	tables := opt.pickTables(s.tables)
	if len(tables) == 0 {
		return iters
	}
	return append(iters, table.NewConcatIterator(tables, topt))
}

type levelHandlerRLocked struct{}

// overlappingTables returns the tables that intersect with key range. Returns a half-interval.
// This function should already have acquired a read lock, and this is so important the caller must
// pass an empty parameter declaring such.
func (s *levelHandler) overlappingTables(_ levelHandlerRLocked, kr keyRange) (int, int) {
	if len(kr.left) == 0 || len(kr.right) == 0 {
		return 0, 0
	}
	left := sort.Search(len(s.tables), func(i int) bool {
		return y.CompareKeys(kr.left, s.tables[i].Biggest()) <= 0
	})
	right := sort.Search(len(s.tables), func(i int) bool {
		return y.CompareKeys(kr.right, s.tables[i].Smallest()) < 0
	})
	return left, right
}
