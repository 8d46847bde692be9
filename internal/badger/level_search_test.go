//go:build upstream

/*
 * SPDX-FileCopyrightText: © 2017-2025 Istari Digital, Inc.
 * SPDX-License-Identifier: Apache-2.0
 */

package badger

import (
	"bytes"
	"fmt"
	"math/rand"
	"sort"
	"testing"

	"github.com/idemkit/idem/internal/badger/options"
	"github.com/idemkit/idem/internal/badger/table"
	"github.com/idemkit/idem/internal/badger/y"
)

// TestSearchTablesMatchesSortSearch checks that a level's search through
// its tables' words gives the table sort.Search over their biggest keys
// gives, for levels whose keys share a long prefix, differ only past the
// word, end in zero bytes or differ in length, probed at every table's
// bounds, between them, before, after and outside the common prefix, at
// several timestamps; and after tables are deleted and replaced.
func TestSearchTablesMatchesSortSearch(t *testing.T) {
	shapes := map[string]func(i int) []byte{
		"short":         func(i int) []byte { return []byte(fmt.Sprintf("k%06d", i)) },
		"long-prefix":   func(i int) []byte { return []byte(fmt.Sprintf("tenant-with-a-long-name/%08d", i)) },
		"past-the-word": func(i int) []byte { return []byte(fmt.Sprintf("abcdefghijkl%06d", i)) },
		"zero-bytes":    func(i int) []byte { return append([]byte(fmt.Sprintf("z%03d", i/4)), make([]byte, i%4)...) },
		"lengths":       func(i int) []byte { return bytes.Repeat([]byte{'a' + byte(i%3)}, 1+i/3) },
	}
	opts := table.Options{BloomFalsePositive: 0.01, ChkMode: options.NoVerification, BlockSize: 4 << 10}
	for name, key := range shapes {
		t.Run(name, func(t *testing.T) {
			const perTable, tables = 5, 40
			var all [][]byte
			for i := range perTable * tables {
				all = append(all, key(i))
			}
			sort.Slice(all, func(i, j int) bool { return bytes.Compare(all[i], all[j]) < 0 })
			var tbls []*table.Table
			for i := 0; i < len(all); i += perTable {
				b := table.NewTableBuilder(opts)
				for _, k := range all[i : i+perTable] {
					b.Add(y.KeyWithTs(k, 5), y.ValueStruct{Value: []byte("v")}, 0)
				}
				tbl, err := table.OpenInMemoryTable(b.Finish(), uint64(i+1), &opts)
				b.Close()
				if err != nil {
					t.Fatal(err)
				}
				tbls = append(tbls, tbl)
			}
			// Shuffled: initTables sorts them.
			rand.New(rand.NewSource(1)).Shuffle(len(tbls), func(i, j int) { tbls[i], tbls[j] = tbls[j], tbls[i] })
			s := &levelHandler{level: 1}
			s.initTables(tbls)
			probes := [][]byte{{}, {0}, []byte("\xff\xff"), []byte("a"), []byte("tenant"), []byte("tenant-with-a-long-name/~")}
			for _, k := range all {
				probes = append(probes, k, append(bytes.Clone(k), 0), k[:len(k)-1], append(bytes.Clone(k), 0xff))
			}
			check := func(when string) {
				for _, p := range probes {
					for _, ts := range []uint64{0, 4, 5, 6, 1 << 62} {
						seek := y.KeyWithTs(p, ts)
						want := sort.Search(len(s.tables), func(i int) bool {
							return y.CompareKeys(s.tables[i].Biggest(), seek) >= 0
						})
						if got := s.searchTables(seek); got != want {
							t.Fatalf("%s: key %q at %d: table %d, want %d", when, p, ts, got, want)
						}
					}
				}
			}
			if len(s.tableWords) != len(s.tables) {
				t.Fatal("initTables did not index the tables")
			}
			check("after initTables")
			if err := s.deleteTables(s.tables[10:13]); err != nil {
				t.Fatal(err)
			}
			if len(s.tableWords) != len(s.tables) {
				t.Fatal("deleteTables did not index the tables")
			}
			check("after deleteTables")
			if err := s.replaceTables(s.tables[:2], nil); err != nil {
				t.Fatal(err)
			}
			check("after replaceTables")
		})
	}
}
