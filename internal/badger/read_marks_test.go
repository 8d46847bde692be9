//go:build upstream

/*
 * SPDX-FileCopyrightText: © 2017-2025 Istari Digital, Inc.
 * SPDX-License-Identifier: Apache-2.0
 */

package badger

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReadMarksTrackReadsInFlight checks the read marks alone: the done
// timestamp stays below the lowest read in flight, rises as soon as it
// ends (no goroutine in between), takes a Done without a Begin (Open's and
// StreamWriter's) as "everything up to here", and never decreases.
func TestReadMarksTrackReadsInFlight(t *testing.T) {
	var r readMarks
	r.Done(4) // as Open does
	require.Equal(t, uint64(4), r.DoneUntil())
	r.Begin(5)
	r.Begin(5)
	r.Begin(7)
	require.Equal(t, uint64(4), r.DoneUntil())
	r.Done(5)
	require.Equal(t, uint64(4), r.DoneUntil())
	r.Done(5)
	require.Equal(t, uint64(6), r.DoneUntil())
	r.Begin(9)
	r.Done(7)
	require.Equal(t, uint64(8), r.DoneUntil())
	r.Done(9)
	require.Equal(t, uint64(9), r.DoneUntil())
	r.Begin(9) // a read at a timestamp already done
	require.Equal(t, uint64(9), r.DoneUntil())
	r.Done(9)
	r.Done(12)
	require.Equal(t, uint64(12), r.DoneUntil())
}

// TestReadMarksHoldDiscardBelowAReader checks them through the DB: a read
// transaction holds the discard timestamp below its own while commits go
// on, and releases it the moment it is discarded.
func TestReadMarksHoldDiscardBelowAReader(t *testing.T) {
	runBadgerTest(t, nil, func(t *testing.T, db *DB) {
		set := func() {
			require.NoError(t, db.Update(func(txn *Txn) error {
				return txn.SetEntry(NewEntry([]byte("x"), []byte("y")))
			}))
		}
		for range 10 {
			set()
		}
		reader := db.NewTransaction(false)
		require.Equal(t, uint64(10), reader.readTs)
		for range 10 {
			set()
		}
		require.Equal(t, uint64(9), db.orc.discardAtOrBelow())
		reader.Discard()
		// With no reader left it follows the commits done (patch 0045):
		// 19 from the reads' marks, 20 once the commit watermark, which
		// catches up on a goroutine of its own, has the last commit.
		require.Contains(t, []uint64{19, 20}, db.orc.discardAtOrBelow())
		require.NoError(t, db.View(func(txn *Txn) error {
			require.Equal(t, uint64(20), txn.readTs)
			// A reader at 20 holds it below 20, or at the 20 it reached
			// (it never decreases; the reader reads the version at 20).
			require.Contains(t, []uint64{19, 20}, db.orc.discardAtOrBelow())
			return nil
		}))
		require.Equal(t, uint64(20), db.orc.discardAtOrBelow())
	})
}
