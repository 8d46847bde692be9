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
)

// TestMaxVersionWhileWriting reads DB.MaxVersion while another goroutine
// writes, as a value-log GC rewrite does when it pins its discard
// threshold. Under the race detector it fails when the memtable's
// maxVersion is a plain field written by Put without db.lock.
func TestMaxVersionWhileWriting(t *testing.T) {
	runBadgerTest(t, nil, func(t *testing.T, db *DB) {
		const n = 500
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := 0; i < n; i++ {
				txnSet(t, db, []byte(fmt.Sprintf("key%05d", i)), []byte("value"), 0)
			}
		}()
		for {
			select {
			case <-done:
				require.GreaterOrEqual(t, db.MaxVersion(), uint64(n))
				return
			default:
				_ = db.MaxVersion()
			}
		}
	})
}
