//go:build upstream

package badger

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestWriteSetCommitAllocs counts what a small commit allocates, the
// write goroutine's work included (AllocsPerRun counts the process's):
// a batch is written by the one writer goroutine, in a slice and a buffer
// reused, and the value sizes are gathered only for a dynamic threshold.
// Before, each batch started a goroutine and made a slice, a buffer and
// the sizes' slice, boxed an index for the watermark's heap and a count for a
// debug line: six allocations in all, where none is left.
func TestWriteSetCommitAllocs(t *testing.T) {
	// As idem's Durable engine opens it: no memtable log, whose encoding
	// allocates per entry on its own.
	opt := DefaultOptions(t.TempDir()).WithLogger(nil).WithDetectConflicts(false)
	opt.DisableMemTableWAL = true
	db, err := Open(opt)
	require.NoError(t, err)
	defer db.Close()
	ws := db.NewWriteSet()
	keys := make([][]byte, 3000)
	for k := range keys {
		keys[k] = []byte(fmt.Sprintf("key%09d", k))
	}
	val := []byte("a small value")
	i := 0
	commit := func() {
		i++
		if err := ws.Set(keys[i], val, 0); err != nil {
			t.Fatal(err)
		}
		if err := ws.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	for range 100 {
		commit() // warm the pools and the writer
	}
	allocs := testing.AllocsPerRun(2000, commit)
	t.Logf("%.1f allocations a commit", allocs)
	require.LessOrEqual(t, allocs, 1.0)
}
