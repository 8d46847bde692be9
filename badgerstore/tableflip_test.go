package badgerstore_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/badgerstore"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/badger/fb"
	"github.com/stretchr/testify/require"
)

// tableFlipOffsets are the offsets of the table raw where
// TestBadger_TableBitFlips flips a bit: every byte of its last 64 (the
// index's length, its checksum and that checksum's length, the end of the
// index), every 7th of the 512 before them (the index: block offsets, the
// Bloom filter), every byte of its first 32 (the first block's first
// entry header and key), the last 24 bytes of every block (its entry
// count, checksum and checksum length, which Badger reads before it
// checks the checksum) and about 120 spread over the rest (the blocks).
func tableFlipOffsets(t *testing.T, raw []byte) []int64 {
	size := int64(len(raw))
	seen := map[int64]bool{}
	var offs []int64
	add := func(o int64) {
		if o >= 0 && o < size && !seen[o] {
			seen[o] = true
			offs = append(offs, o)
		}
	}
	for o := range int64(32) {
		add(o)
	}
	for _, end := range blockEnds(t, raw) {
		for o := end - 24; o < end; o++ {
			add(o)
		}
	}
	for i := range int64(120) {
		add(32 + (size-608)*i/120)
	}
	for o := size - 576; o < size-64; o += 7 {
		add(o)
	}
	for o := size - 64; o < size; o++ {
		add(o)
	}
	return offs
}

// blockEnds returns where each block of the table raw ends, read from its
// index (the layout Badger writes: blocks, index, index length, checksum,
// checksum length).
func blockEnds(t *testing.T, raw []byte) []int64 {
	pos := len(raw) - 4
	pos -= int(binary.BigEndian.Uint32(raw[pos:]))
	pos -= 4
	n := int(binary.BigEndian.Uint32(raw[pos:]))
	index := fb.GetRootAsTableIndex(raw[pos-n:pos], 0)
	var ends []int64
	var ko fb.BlockOffset
	for i := range index.OffsetsLength() {
		require.True(t, index.Offsets(&ko, i))
		ends = append(ends, int64(ko.Offset())+int64(ko.Len()))
	}
	require.NotEmpty(t, ends)
	return ends
}

// TestBadger_TableBitFlips flips one bit at a time, at offsets over the
// whole of a real table (its blocks, its index, the checksums and lengths
// at its end), each in a copy of a real store, plain and compressed. The
// open refuses the copy with ErrCorrupt naming the table; opened without
// the check of every block (SkipTableVerify), it is refused the same way
// or Verify reports damage naming the table. Never a panic, never a
// runtime error.
func TestBadger_TableBitFlips(t *testing.T) {
	for _, c := range []struct {
		name string
		o    badgerstore.Options
	}{
		{"plain", badgerstore.Options{Compression: badgerstore.CompressionNone}},
		{"s2", badgerstore.Options{}},
		{"zstd", badgerstore.Options{Compression: badgerstore.CompressionZstd}},
	} {
		t.Run(c.name, func(t *testing.T) { tableBitFlips(t, c.o) })
	}
}

func tableBitFlips(t *testing.T, o badgerstore.Options) {
	const n = 300
	src := t.TempDir()
	writeFaultKeys(t, src, o, 0, n)
	tables, err := filepath.Glob(filepath.Join(src, "*.sst"))
	require.NoError(t, err)
	require.NotEmpty(t, tables)
	table := tables[len(tables)-1] // the last written: the flush at Close
	name := filepath.Base(table)
	raw, err := os.ReadFile(table)
	require.NoError(t, err)
	require.Greater(t, len(raw), 4096, "too small a table to stand for one")

	requireNamed := func(t *testing.T, err error, when string) {
		t.Helper()
		require.ErrorIs(t, err, backend.ErrCorrupt, when)
		require.ErrorContains(t, err, name, "%s: the error names the table", when)
		require.NotContains(t, err.Error(), "runtime error", when)
		require.NotContains(t, err.Error(), "nil pointer", when)
	}
	offs := tableFlipOffsets(t, raw)
	if raceEnabled {
		// Each flip is a few opens on one goroutine, 5x slower under the
		// race detector: every 5th still reaches every part of the table.
		var some []int64
		for i := 0; i < len(offs); i += 5 {
			some = append(some, offs[i])
		}
		offs = some
	}
	var harmless atomic.Int32
	for i, off := range offs {
		bit := byte(1) << (i % 8)
		t.Run(fmt.Sprintf("offset%d^%#x", off, bit), func(t *testing.T) {
			dir := copyDir(t, src)
			damaged := append([]byte(nil), raw...)
			damaged[off] ^= bit
			require.NoError(t, os.WriteFile(filepath.Join(dir, name), damaged, 0o600))

			s, err := idemtest.OpenBadger(dir, &idem.Options{SweepInterval: -1, Clock: faultClock()}, o)
			if err == nil {
				// A bit a decoder ignores (zstd's frame header has one):
				// nothing is damaged, and everything replays.
				defer s.Close()
				requireIntact(t, s, n)
				harmless.Add(1)
				return
			}
			requireNamed(t, err, "open")
			t.Logf("refused: %v", err)

			skip := o
			skip.SkipTableVerify = true
			s, err = idemtest.OpenBadger(dir, &idem.Options{SweepInterval: -1, Clock: faultClock()}, skip)
			if err != nil {
				requireNamed(t, err, "open without the block check")
				return
			}
			defer s.Close()
			report, err := s.Verify(bg)
			require.NoError(t, err)
			var tables []string
			for _, d := range report.Damage {
				if d.Part == "tables" {
					tables = append(tables, d.Problem)
				}
			}
			require.Len(t, tables, 1, "Verify: %v", report.Damage)
			require.Contains(t, tables[0], name, "Verify names the table")
			require.NotContains(t, tables[0], "runtime error")
		})
	}
	t.Logf("%d offsets of %s (%d bytes); %d flips changed nothing", len(offs), name, len(raw), harmless.Load())
	if o.Compression == badgerstore.CompressionNone {
		require.Zero(t, harmless.Load(), "an uncompressed table has no bit its checksums do not cover")
	}
}

// faultClock is openStore's clock: the stores written there are live on it.
func faultClock() *idemtest.Clock {
	return idemtest.NewClock(time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC))
}

// requireIntact requires s to pass Verify and to replay every key of
// faultStore with its own body, running no effect.
func requireIntact(t *testing.T, s *idem.Store, n int) {
	t.Helper()
	report, err := s.Verify(bg)
	require.NoError(t, err)
	require.True(t, report.OK(), "Verify: %v", report.Damage)
	for i := range n {
		res, replayed, err := s.Do(bg, idem.Request{Key: fmt.Sprint(i)}, func(context.Context) (backend.Result, error) {
			return backend.Result{}, fmt.Errorf("the effect of key %d ran again", i)
		})
		require.NoError(t, err)
		require.True(t, replayed, "key %d", i)
		require.Equal(t, faultBody(i), res.Body, "key %d", i)
	}
}

// TestBadger_TableBitFlips_MixedCompression damages the S2 table of a
// store that also holds an uncompressed one (written before, with
// CompressionNone). An open refused names the damaged table: the check
// that finds it reads each table with the compression the table was
// written with, not the open's.
func TestBadger_TableBitFlips_MixedCompression(t *testing.T) {
	const n = 300
	src := t.TempDir()
	writeFaultKeys(t, src, badgerstore.Options{Compression: badgerstore.CompressionNone}, 0, n)
	plain, err := filepath.Glob(filepath.Join(src, "*.sst"))
	require.NoError(t, err)
	require.Len(t, plain, 1)

	writeFaultKeys(t, src, badgerstore.Options{}, n, n)
	tables, err := filepath.Glob(filepath.Join(src, "*.sst"))
	require.NoError(t, err)
	require.Len(t, tables, 2)
	require.Equal(t, plain[0], tables[0], "the plain table is read first")
	name := filepath.Base(tables[1])
	raw, err := os.ReadFile(tables[1])
	require.NoError(t, err)

	offs := tableFlipOffsets(t, raw)
	refused := 0
	for i := 0; i < len(offs); i += 7 {
		off, bit := offs[i], byte(1)<<(i%8)
		dir := copyDir(t, src)
		damaged := append([]byte(nil), raw...)
		damaged[off] ^= bit
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), damaged, 0o600))
		s, err := idemtest.OpenBadger(dir, &idem.Options{SweepInterval: -1, Clock: faultClock()}, badgerstore.Options{})
		if err == nil {
			require.NoError(t, s.Close())
			continue
		}
		refused++
		require.ErrorIs(t, err, backend.ErrCorrupt, "offset %d", off)
		require.ErrorContains(t, err, name, "offset %d: the error names the damaged table", off)
	}
	require.NotZero(t, refused, "no flip was refused at open")
}

// writeFaultKeys opens a store in dir with o, completes keys from to
// from+n-1 with faultBody results, and closes it (flushing a table).
func writeFaultKeys(t *testing.T, dir string, o badgerstore.Options, from, n int) {
	t.Helper()
	s := openStoreWith(t, dir, &idem.Options{}, o)
	for i := from; i < from+n; i++ {
		_, _, err := s.Do(bg, idem.Request{Key: fmt.Sprint(i)}, ok(string(faultBody(i-from))))
		require.NoError(t, err)
	}
	require.NoError(t, s.Close())
}
