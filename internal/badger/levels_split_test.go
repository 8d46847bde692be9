//go:build upstream

/*
 * SPDX-FileCopyrightText: © 2017-2025 Istari Digital, Inc.
 * SPDX-License-Identifier: Apache-2.0
 */

package badger

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/internal/badger/options"
)

// A compaction whose splits write many more tables than the throttle has
// slots (2 + splits) and res has room (3) completes and keeps every
// version: each table's goroutine holds a slot until its table is taken
// from res, so res is drained from the start, while the splits are being
// started.
func TestCompactionManySplitsManyTables(t *testing.T) {
	opt := DefaultOptions("").WithNumCompactors(0).WithCompression(options.None)
	opt.managedTxns = true
	runBadgerTest(t, &opt, func(t *testing.T, db *DB) {
		const tables, perTable = 15, 400 // 15 bottom tables: 5 splits
		val := func(v, i int) string { return fmt.Sprintf("value %d of key %d %0100d", v, i, i) }
		var want []keyValVersion
		for tb := 0; tb < tables; tb++ {
			var td []keyValVersion
			for i := tb * perTable; i < (tb+1)*perTable; i++ {
				td = append(td, keyValVersion{key: fmt.Sprintf("key%06d", i), val: val(1, i), version: 1})
			}
			createAndOpen(db, td, 1)
		}
		// L0: one table over the whole range, a newer version of every 10th key.
		var top []keyValVersion
		for i := 0; i < tables*perTable; i++ {
			k := fmt.Sprintf("key%06d", i)
			if i%10 == 0 {
				top = append(top, keyValVersion{key: k, val: val(2, i), version: 2})
				want = append(want, keyValVersion{key: k, val: val(2, i), version: 2})
			}
			want = append(want, keyValVersion{key: k, val: val(1, i), version: 1})
		}
		createAndOpen(db, top, 0)

		cdef := compactDef{
			thisLevel: db.lc.levels[0],
			nextLevel: db.lc.levels[1],
			top:       db.lc.levels[0].tables,
			bot:       db.lc.levels[1].tables,
			t:         db.lc.levelTargets(),
		}
		cdef.t.baseLevel = 1
		cdef.t.fileSz[1] = 8 << 10 // many small tables per split
		require.NoError(t, db.lc.runCompactDef(-1, 0, cdef))

		require.Empty(t, db.lc.levels[0].tables)
		require.Greater(t, len(db.lc.levels[1].tables), 5*(2+5+3),
			"the compaction wrote too few tables to fill the throttle and res")
		getAllAndCheck(t, db, want)
	})
}
