/*
 * SPDX-FileCopyrightText: © 2017-2025 Istari Digital, Inc.
 * SPDX-License-Identifier: Apache-2.0
 */

package badger

import (
	"bytes"
	"sort"

	"github.com/idemkit/idem/internal/badger/y"
)

// reindexLocked fills tableCommon and tableWords from the tables of a
// level >= 1, sorted by key range. Called with s.Lock held, whenever the
// tables change.
func (s *levelHandler) reindexLocked() {
	s.tableCommon, s.tableWords = nil, nil
	n := len(s.tables)
	if s.level == 0 || n == 0 {
		return
	}
	first, last := y.ParseKey(s.tables[0].Biggest()), y.ParseKey(s.tables[n-1].Biggest())
	c := 0
	for c < len(first) && c < len(last) && first[c] == last[c] {
		c++
	}
	// The ranges do not overlap, so the biggest keys are sorted: every one
	// between the first and the last shares their common prefix.
	s.tableCommon = bytes.Clone(first[:c])
	words := make([]uint64, n)
	for i, t := range s.tables {
		words[i] = y.KeyWord(y.ParseKey(t.Biggest())[c:])
	}
	s.tableWords = words
}

// searchTables returns the index of the first table of a level >= 1 whose
// biggest key is at least key (a key with its timestamp), or the number of
// tables: sort.Search with y.CompareKeys over the tables' biggest keys.
// With random point reads each step of that search reads a table's key in
// memory of its own, a likely cache miss; here most steps compare the
// table's word in tableWords, one array, and only a table whose word
// equals the key's is compared in full. Called with s's lock held.
func (s *levelHandler) searchTables(key []byte) int {
	n := len(s.tables)
	full := func(i int) bool { return y.CompareKeys(s.tables[i].Biggest(), key) >= 0 }
	words := s.tableWords
	if len(words) != n {
		return sort.Search(n, full)
	}
	return y.SearchWords(n, s.tableCommon, words, key, full)
}
