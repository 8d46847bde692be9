package engine

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/idemkit/idem/internal/badger"
	"github.com/stretchr/testify/require"
)

// tryOpen opens dir as openEngine does, returning the error.
func tryOpen(t *testing.T, dir string, accept bool) error {
	t.Helper()
	e, err := Open(Options{Durable: true, AcceptLoss: accept,
		Badger: badger.DefaultOptions(dir).WithLogger(nil).WithMemTableSize(4 << 20).WithValueThreshold(16 << 10)})
	if err == nil {
		require.NoError(t, e.Close())
	}
	return err
}

// filled makes a closed store in a new directory whose writes reached
// Badger's tables (a flush at Close), and returns the directory.
func filled(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	e := openEngine(t, dir, Options{Durable: true})
	for i := range 200 {
		put(t, e, string(rune('a'+i%26))+string(rune('0'+i/26)), "value")
	}
	require.NoError(t, e.Close())
	return dir
}

func TestOpen_LossIsRefusedUnlessAccepted(t *testing.T) {
	for _, c := range []struct {
		name   string
		damage func(t *testing.T, dir string)
	}{
		{"MANIFEST deleted", func(t *testing.T, dir string) {
			require.NoError(t, os.Remove(filepath.Join(dir, badger.ManifestFilename)))
		}},
		{"MANIFEST truncated", func(t *testing.T, dir string) {
			require.NoError(t, os.Truncate(filepath.Join(dir, badger.ManifestFilename), 8))
		}},
		{"log deleted", func(t *testing.T, dir string) {
			require.NoError(t, os.Remove(filepath.Join(dir, LogName)))
		}},
		{"log truncated", func(t *testing.T, dir string) {
			require.NoError(t, os.Truncate(filepath.Join(dir, LogName), 4096))
		}},
		{"mark damaged", func(t *testing.T, dir string) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, MarkName), []byte("{"), 0o600))
		}},
		{"table truncated", func(t *testing.T, dir string) {
			sst := tables(t, dir)
			info, err := os.Stat(sst[0])
			require.NoError(t, err)
			require.NoError(t, os.Truncate(sst[0], info.Size()/2))
		}},
		{"table index damaged", func(t *testing.T, dir string) {
			sst := tables(t, dir)
			raw, err := os.ReadFile(sst[0])
			require.NoError(t, err)
			raw[len(raw)-60] ^= 1 // in the index, before its checksum
			require.NoError(t, os.WriteFile(sst[0], raw, 0o600))
		}},
		{"table deleted", func(t *testing.T, dir string) {
			require.NoError(t, os.Remove(tables(t, dir)[0]))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filled(t)
			c.damage(t, dir)
			err := tryOpen(t, dir, false)
			require.ErrorIs(t, err, ErrCorrupt)
			t.Log(err)
			require.ErrorIs(t, tryOpen(t, dir, false), ErrCorrupt, "a refused open changes nothing that makes the next one pass")
			_, err = Open(Options{Badger: badger.DefaultOptions(dir).WithLogger(nil).WithReadOnly(true)})
			require.ErrorIs(t, err, ErrCorrupt, "read-only")
			require.ErrorIs(t, tryOpen(t, dir, false), ErrCorrupt, "a refused read-only open moves nothing")
		})
	}
}

// TestOpen_AcceptLoss opens a store that lost its MANIFEST once the loss
// is accepted; the next open needs no flag.
func TestOpen_AcceptLoss(t *testing.T) {
	dir := filled(t)
	require.NoError(t, os.Remove(filepath.Join(dir, LogName)))
	require.ErrorIs(t, tryOpen(t, dir, false), ErrCorrupt)
	require.NoError(t, tryOpen(t, dir, true))
	require.NoError(t, tryOpen(t, dir, false))
}

// TestOpen_AcceptedLossIsRecorded: an open that accepts a loss records
// what was lost under LossKey, durably with the new mark, and keeps it
// (the store above deletes it); an open that accepts nothing records
// nothing.
func TestOpen_AcceptedLossIsRecorded(t *testing.T) {
	lossOf := func(dir string) string {
		e := openEngine(t, dir, Options{Durable: true})
		v, _ := read(t, e, LossKey)
		require.NoError(t, e.Close())
		return v
	}
	dir := filled(t)
	require.NoError(t, tryOpen(t, dir, true), "nothing to accept")
	require.Empty(t, lossOf(dir))

	require.NoError(t, os.Remove(filepath.Join(dir, LogName)))
	require.NoError(t, tryOpen(t, dir, true))
	first := lossOf(dir)
	require.Contains(t, first, LogName+" is missing")

	require.NoError(t, os.WriteFile(filepath.Join(dir, MarkName), []byte("{"), 0o600))
	require.NoError(t, tryOpen(t, dir, true))
	both := lossOf(dir)
	require.Contains(t, both, first, "a second loss adds to the first")
	require.Contains(t, both, MarkName+" is damaged")
}

// TestOpen_UnreferencedTableOfACrashIsRemoved leaves a table the MANIFEST
// does not name, holding nothing newer than Badger (as a crash between
// writing a compacted table and recording it does): the open goes on and
// removes it, as Badger would.
func TestOpen_UnreferencedTableOfACrashIsRemoved(t *testing.T) {
	dir := filled(t)
	sst := tables(t, dir)
	raw, err := os.ReadFile(sst[0])
	require.NoError(t, err)
	extra := filepath.Join(dir, "999999.sst")
	require.NoError(t, os.WriteFile(extra, raw, 0o600))
	require.NoError(t, tryOpen(t, dir, false))
	_, err = os.Stat(extra)
	require.ErrorIs(t, err, os.ErrNotExist)
	_, err = os.Stat(filepath.Join(dir, QuarantineName, "999999.sst"))
	require.ErrorIs(t, err, os.ErrNotExist)
}

// TestOpen_PartialTableOfACrashIsRemoved: a kill while Badger writes a
// table it has not recorded yet leaves it empty or cut short; the store
// must reopen (the crash test found a 0-byte table refused).
func TestOpen_PartialTableOfACrashIsRemoved(t *testing.T) {
	for name, size := range map[string]int{"empty": 0, "cut short": 100} {
		t.Run(name, func(t *testing.T) {
			dir := filled(t)
			raw, err := os.ReadFile(tables(t, dir)[0])
			require.NoError(t, err)
			extra := filepath.Join(dir, "999999.sst")
			require.NoError(t, os.WriteFile(extra, raw[:size], 0o600))
			require.NoError(t, tryOpen(t, dir, false))
			_, err = os.Stat(extra)
			require.ErrorIs(t, err, os.ErrNotExist)
		})
	}
}

// TestOpen_ZeroFilledTableOfACrashIsRemoved: Badger sizes a table's file
// before writing it, so a kill can leave one of zeros, whose empty index
// passes its empty checksum; the check must not hand it to flatbuffers
// (a panic in Open: idem torture found it).
func TestOpen_ZeroFilledTableOfACrashIsRemoved(t *testing.T) {
	dir := filled(t)
	extra := filepath.Join(dir, "999999.sst")
	require.NoError(t, os.WriteFile(extra, make([]byte, 64<<10), 0o600))
	require.NoError(t, tryOpen(t, dir, false))
	_, err := os.Stat(extra)
	require.ErrorIs(t, err, os.ErrNotExist)
	zero := filepath.Join(t.TempDir(), "000001.sst")
	require.NoError(t, os.WriteFile(zero, make([]byte, 4096), 0o600))
	_, err = checkTable(zero)
	require.ErrorIs(t, err, ErrCorrupt)
}

func tables(t *testing.T, dir string) []string {
	t.Helper()
	sst, err := filepath.Glob(filepath.Join(dir, "*.sst"))
	require.NoError(t, err)
	require.NotEmpty(t, sst, "no table was written")
	return sst
}

// TestOpen_DamagedBlock flips a bit in a table's first block: the open
// refuses it (Badger alone would take the block for absent keys), unless
// the check is skipped.
func TestOpen_DamagedBlock(t *testing.T) {
	dir := filled(t)
	sst := tables(t, dir)
	raw, err := os.ReadFile(sst[0])
	require.NoError(t, err)
	raw[40] ^= 1
	require.NoError(t, os.WriteFile(sst[0], raw, 0o600))
	require.ErrorIs(t, tryOpen(t, dir, false), ErrCorrupt)

	e, err := Open(Options{Durable: true, SkipTableVerify: true,
		Badger: badger.DefaultOptions(dir).WithLogger(nil).WithMemTableSize(4 << 20).WithValueThreshold(16 << 10)})
	require.NoError(t, err, "with the check skipped")
	require.ErrorIs(t, e.VerifyTables(), ErrCorrupt, "Verify still finds it")
	require.NoError(t, e.Close())
}

// TestOpen_FirstDurableCheckpointCutOff: the first Durable open of a store
// written without the log (Fast) checkpoints, writing the mark into a
// memtable with no log of its own and flushing it; a kill between the
// table's sync and the MANIFEST's leaves a table whose only commit newer
// than Badger's is that mark. The store must reopen (idem rekey killed on a
// Fast store found it refused as a truncated MANIFEST).
func TestOpen_FirstDurableCheckpointCutOff(t *testing.T) {
	dir := t.TempDir()
	e := openEngine(t, dir, Options{})
	for i := range 50 {
		put(t, e, "k"+string(rune('a'+i%26))+string(rune('0'+i/26)), "value")
	}
	require.NoError(t, e.Close())
	before := t.TempDir()
	require.NoError(t, os.CopyFS(before, os.DirFS(dir)))
	had := map[string]bool{}
	for _, p := range tables(t, before) {
		had[filepath.Base(p)] = true
	}

	// The open's checkpoint writes the first new table (the close's
	// writes the next).
	require.NoError(t, openEngine(t, dir, Options{Durable: true}).Close())
	var first string
	for _, p := range tables(t, dir) {
		if !had[filepath.Base(p)] && (first == "" || filepath.Base(p) < filepath.Base(first)) {
			first = p
		}
	}
	require.NotEmpty(t, first, "the first Durable open wrote no table")
	raw, err := os.ReadFile(first)
	require.NoError(t, err)
	cut := filepath.Join(before, filepath.Base(first))
	require.NoError(t, os.WriteFile(cut, raw, 0o600))
	require.NoError(t, tryOpen(t, before, false))
	// Removed, not kept aside (the next checkpoint may reuse its name).
	_, err = os.Stat(filepath.Join(before, QuarantineName, filepath.Base(cut)))
	require.ErrorIs(t, err, os.ErrNotExist)
	e = openEngine(t, before, Options{Durable: true})
	got, ok := read(t, e, "ka0")
	require.True(t, ok)
	require.Equal(t, "value", got)
}
