package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/idemkit/idem/internal/badger"
	"github.com/idemkit/idem/internal/badger/fb"
	"github.com/idemkit/idem/internal/badger/options"
	"github.com/idemkit/idem/internal/badger/pb"
	"github.com/idemkit/idem/internal/badger/table"
	"github.com/idemkit/idem/internal/badger/y"
	"github.com/idemkit/idem/internal/ristretto/z"
	"google.golang.org/protobuf/proto"
)

// QuarantineName is the directory tables the MANIFEST does not reference
// are moved to while a store opens (Badger would delete them).
const QuarantineName = "idem.quarantine"

// preflight is what Open learns about dir before Badger reads it.
type preflight struct {
	// quarantined are the tables the MANIFEST does not reference, moved
	// to QuarantineName; maxQuarantined is the highest version they hold.
	quarantined    []string
	maxQuarantined uint64
	// moved says they were moved (not in a read-only open, where Badger
	// deletes nothing and they stay where they are).
	moved bool
}

// checkBefore checks what Badger will read in dir before it reads it, so
// that damage is an error naming the file rather than a panic on one of
// Badger's goroutines (a truncated table), a table silently ignored (a
// table whose index fails its checksum), or tables deleted (a lost
// MANIFEST). Tables the MANIFEST does not reference (a crash between
// writing a table and recording it, or a truncated MANIFEST) are moved
// aside for checkAfter to judge.
func checkBefore(dir string, bo badger.Options) (preflight, error) {
	var pf preflight
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return pf, nil
	}
	if err != nil {
		return pf, err
	}
	tables := map[uint64]string{}
	data := false
	for _, en := range entries {
		name := en.Name()
		if id, ok := table.ParseFileID(name); ok && strings.HasSuffix(name, ".sst") {
			tables[id] = name
		}
		if strings.HasSuffix(name, ".sst") || strings.HasSuffix(name, ".vlog") {
			data = true
		}
	}
	mf, err := os.Open(filepath.Join(dir, badger.ManifestFilename))
	if errors.Is(err, fs.ErrNotExist) {
		if data {
			return pf, fmt.Errorf("%w: %s is missing but the directory holds tables or value logs: Badger would open it empty and delete them", ErrCorrupt, badger.ManifestFilename)
		}
		return pf, nil
	}
	if err != nil {
		return pf, err
	}
	m, _, err := badger.ReplayManifestFile(mf, bo.ExternalMagicVersion, bo)
	mf.Close()
	if err != nil {
		return pf, fmt.Errorf("%w: %s: %v", ErrCorrupt, badger.ManifestFilename, err)
	}
	for id, name := range tables {
		v, err := checkTable(filepath.Join(dir, name))
		if _, ok := m.Tables[id]; ok {
			if err != nil {
				return pf, err
			}
			continue
		}
		// Not recorded: a table whose writing a crash cut off (it may be
		// empty or partial, and Badger would delete it), or one a
		// truncated MANIFEST forgot, which checkAfter finds by its
		// versions. A partial one holds nothing Badger relies on: the
		// memtable log it was flushed from, or the tables it was compacted
		// from, are kept until a table is recorded.
		pf.quarantined = append(pf.quarantined, name)
		if err == nil {
			pf.maxQuarantined = max(pf.maxQuarantined, v)
		}
	}
	for id := range m.Tables {
		if _, ok := tables[id]; !ok {
			return pf, fmt.Errorf("%w: table %s named by the MANIFEST is missing", ErrCorrupt, table.IDToFilename(id))
		}
	}
	if bo.ReadOnly || len(pf.quarantined) == 0 {
		return pf, nil // a read-only Badger deletes nothing
	}
	q := filepath.Join(dir, QuarantineName)
	if err := os.MkdirAll(q, 0o700); err != nil {
		return pf, err
	}
	for _, name := range pf.quarantined {
		if err := os.Rename(filepath.Join(dir, name), filepath.Join(q, name)); err != nil {
			return pf, err
		}
		pf.moved = true
	}
	return pf, nil
}

// checkAfter judges the tables checkBefore moved aside, now that Badger
// is open: leftovers of a crash hold nothing newer than what Badger holds
// (their writes are in the tables they were compacted from, or in the
// memtable log they were flushed from, which Badger keeps until the table
// is recorded), and are removed. Otherwise the MANIFEST lost them: the
// error says so, and they go back (the open fails), unless accept, which
// keeps them aside.
func checkAfter(dir string, db *badger.DB, pf preflight, accept bool) error {
	if len(pf.quarantined) == 0 {
		return nil
	}
	q := filepath.Join(dir, QuarantineName)
	have := db.MaxVersion()
	if pf.maxQuarantined <= have {
		if !pf.moved {
			return nil
		}
		for _, name := range pf.quarantined {
			if err := os.Remove(filepath.Join(q, name)); err != nil {
				return err
			}
		}
		return nil
	}
	err := fmt.Errorf("%w: tables %s are not in the MANIFEST and hold commits up to version %d, Badger only up to %d (a truncated MANIFEST)",
		ErrCorrupt, strings.Join(pf.quarantined, ", "), pf.maxQuarantined, have)
	switch {
	case !pf.moved:
		return err
	case accept:
		return fmt.Errorf("%w; they are kept in %s", err, q)
	}
	for _, name := range pf.quarantined {
		if err := os.Rename(filepath.Join(q, name), filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	return err
}

// checkTable reads the footer and index of the table at path as Badger
// will (not its blocks), and checks the index's checksum. It returns the
// highest version the table holds.
func checkTable(path string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return 0, err
	}
	size := info.Size()
	bad := func(what string) (uint64, error) {
		return 0, fmt.Errorf("%w: table %s (%d bytes): %s", ErrCorrupt, filepath.Base(path), size, what)
	}
	read := func(off, n int64) ([]byte, error) {
		b := make([]byte, n)
		_, err := f.ReadAt(b, off)
		return b, err
	}
	pos := size - 4
	if pos < 4 {
		return bad("too short")
	}
	b, err := read(pos, 4)
	if err != nil {
		return 0, err
	}
	n := int64(binary.BigEndian.Uint32(b))
	if n > pos-4 {
		return bad("checksum length out of bounds (truncated?)")
	}
	pos -= n
	if b, err = read(pos, n); err != nil {
		return 0, err
	}
	var sum pb.Checksum
	if err := proto.Unmarshal(b, &sum); err != nil {
		return bad("checksum unreadable")
	}
	pos -= 4
	if b, err = read(pos, 4); err != nil {
		return 0, err
	}
	n = int64(binary.BigEndian.Uint32(b))
	if n > pos {
		return bad("index length out of bounds (truncated?)")
	}
	pos -= n
	index, err := read(pos, n)
	if err != nil {
		return 0, err
	}
	if err := y.VerifyChecksum(index, &sum); err != nil {
		return bad("index fails its checksum")
	}
	// A zero-filled file (Badger sizes a table's file before it writes it,
	// and a kill can come first) has an empty index whose empty checksum
	// matches; flatbuffers would panic on it. The torture found one.
	if n < 4 {
		return bad("no index (zero-filled: cut off while written?)")
	}
	return fb.GetRootAsTableIndex(index, 0).MaxVersion(), nil
}

// openTables opens, as Badger does when it opens the store, every table in
// dir, each alone: it reads the index and the last block (for the table's
// biggest key). It is what an open that Badger refused runs: Badger's
// error says which table failed only in its text, and a damaged last block
// fails the open before verifyTables names it. It returns ErrCorrupt
// naming the first table that fails and why, or nil.
func openTables(bo badger.Options) error {
	entries, err := os.ReadDir(bo.Dir)
	if err != nil {
		return err
	}
	topt := table.Options{
		ReadOnly: true,
		// idem's mode (badgerOptions): blocks are checked as they are
		// read, and OpenTable does not verify the whole table.
		ChkMode:              options.OnBlockRead,
		BlockSize:            bo.BlockSize,
		BloomFalsePositive:   bo.BloomFalsePositive,
		Compression:          bo.Compression,
		ZSTDCompressionLevel: bo.ZSTDCompressionLevel,
		TableSize:            uint64(bo.BaseTableSize),
	}
	for _, en := range entries {
		name := en.Name()
		if _, ok := table.ParseFileID(name); !ok || !strings.HasSuffix(name, ".sst") {
			continue
		}
		if err := openAnyTable(filepath.Join(bo.Dir, name), topt); err != nil {
			return fmt.Errorf("%w: table %s: %v", ErrCorrupt, name, err)
		}
	}
	return nil
}

// openAnyTable opens the table at path as openTable does, with topt's
// compression, then with each other one: a table records its compression
// in the MANIFEST, which may be what the open refused, and a store holds
// tables of the options (and releases) that wrote them. It returns the
// error with topt's compression if none reads the table.
func openAnyTable(path string, topt table.Options) error {
	err := openTable(path, topt)
	for _, c := range []options.CompressionType{options.None, options.Snappy, options.ZSTD} {
		if err == nil || c == topt.Compression {
			continue
		}
		o := topt
		o.Compression = c
		if openTable(path, o) == nil {
			return nil
		}
	}
	return err
}

// openTable opens the table at path with Badger's table package and
// closes it; a panic while reading it is its damage.
func openTable(path string, topt table.Options) (err error) {
	mf, err := z.OpenMmapFile(path, os.O_RDONLY, 0)
	if err != nil && !errors.Is(err, z.NewFile) {
		return err
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("reading it failed: %v", r)
		}
	}()
	t, err := table.OpenTable(mf, topt)
	if err != nil {
		// With a valid name and OnBlockRead, OpenTable fails only reading
		// the table, and leaves mf open.
		_ = mf.Close(-1)
		return err
	}
	return t.MmapFile.Close(-1) // not DecrRef, which deletes the file
}
