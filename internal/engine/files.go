package engine

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/idemkit/idem/internal/badger"
	"github.com/idemkit/idem/internal/wal"
)

// applyChunk bounds the bytes a replay commits per Badger transaction.
const applyChunk = 64 << 10

// openLog replays what the log holds beyond Badger's last checkpoint and
// keeps the log open if durable. A Fast engine replays a log a Durable one
// left (or its stale frames would be replayed over newer writes by the
// next Durable open) and then writes none.
func (e *Engine) openLog(durable bool) error {
	path := filepath.Join(e.dir, LogName)
	if !durable {
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return nil
		}
	}
	l, frames, err := wal.Open(path, wal.Options{Buffered: e.opts.BufferedLog})
	if err != nil {
		return err
	}
	e.log = l
	fail := func(err error) error {
		_ = l.Close()
		e.log = nil
		return err
	}
	if len(frames) > 0 {
		if err := applyFrames(e.db, frames); err != nil {
			return fail(err)
		}
		if err := e.checkpoint(); err != nil {
			return fail(err)
		}
	}
	if !durable {
		e.log = nil
		return l.Close()
	}
	return nil
}

// checkpoint makes everything Badger holds durable in its own files, then
// starts a new generation of the log. It runs on the syncer (or a lone
// caller holding the committer's role), or at open and Close when the
// committer is not running.
func (e *Engine) checkpoint() error {
	if err := e.markDurable(); err != nil {
		return err
	}
	return e.log.Reset()
}

// syncBadgerFiles makes every write Badger has accepted durable. Where
// Badger's memtables keep no log (Durable: idem's log holds their writes),
// it first flushes every memtable to a level-0 table, which Badger syncs
// and records in its MANIFEST. Then the active memtable's log, if any, and
// the value log through Badger, every memtable log and value-log file in
// the directory (immutable memtables not yet flushed to tables, older
// value logs), and the directory.
func syncBadgerFiles(db *badger.DB, dir string) error {
	if db.Opts().DisableMemTableWAL {
		if err := db.FlushMemTables(); err != nil {
			return err
		}
	}
	if err := db.Sync(); err != nil {
		return err
	}
	entries, err := badgerLogs(dir)
	if err != nil {
		return err
	}
	for _, en := range entries {
		f, err := os.Open(filepath.Join(dir, en.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			continue // flushed to a table (synced by Badger) and removed
		}
		if err != nil {
			return err
		}
		err = wal.SyncData(f)
		f.Close()
		if err != nil {
			return err
		}
	}
	return wal.SyncDir(dir)
}

// badgerLogs lists Badger's memtable logs (.mem) and value logs (.vlog)
// in dir.
func badgerLogs(dir string) ([]os.DirEntry, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []os.DirEntry
	for _, en := range entries {
		name := en.Name()
		if !en.IsDir() && (strings.HasSuffix(name, ".mem") || strings.HasSuffix(name, ".vlog")) {
			out = append(out, en)
		}
	}
	return out, nil
}

// applyFrames writes replayed frames into Badger, in order, committing
// every applyChunk bytes or so, and whenever a transaction is full. A
// frame holds whole values and the committer is the only writer, so
// applying frames Badger already holds, in order, changes nothing.
func applyFrames(db *badger.DB, frames [][]wal.Entry) error {
	txn := db.NewTransaction(true)
	defer func() { txn.Discard() }()
	bytes := 0
	for _, f := range frames {
		for _, en := range f {
			err := setEntry(txn, en.Key, en.Value, en.Delete, en.ExpiresAt)
			if bytes > applyChunk || errors.Is(err, badger.ErrTxnTooBig) {
				if cerr := txn.Commit(); cerr != nil {
					return cerr
				}
				txn, bytes = db.NewTransaction(true), 0
				if err != nil {
					err = setEntry(txn, en.Key, en.Value, en.Delete, en.ExpiresAt)
				}
			}
			if err != nil {
				return err
			}
			bytes += len(en.Key) + len(en.Value) + 16
		}
	}
	return txn.Commit()
}

// removeEmptyLogs deletes zero-byte value-log and memtable files. A process
// killed while Badger opens can leave such a file behind, and Badger
// v4.9.6 then refuses to open the directory once ("Create a new file",
// github.com/dgraph-io/badger/issues/2207). An empty file holds no data.
func removeEmptyLogs(dir string) error {
	entries, err := badgerLogs(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, en := range entries {
		name := en.Name()
		info, err := en.Info()
		if err != nil {
			return err
		}
		if info.Size() == 0 {
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				return err
			}
		}
	}
	return nil
}

// Usage is the space an engine's directory takes on disk: the blocks
// allocated to its files where the system tells (an open store's value
// log is a sparse file, allocated as it is written), their sizes elsewhere.
type Usage struct {
	Tables   int64 // Badger's tables (.sst)
	ValueLog int64 // Badger's value logs (.vlog)
	Log      int64 // idem's log
	Total    int64 // every file, memtable logs and manifest included
	// Free is what the directory's file system has free, -1 where it
	// cannot be measured; Reserve is Options.Reserve, the free space below
	// which LowSpace refuses new work.
	Free, Reserve int64
}

// DiskUsage measures the directory now (Badger's own DB.Size is refreshed
// once a minute, and only with metrics on). An in-memory engine takes
// none.
func (e *Engine) DiskUsage() (Usage, error) {
	var u Usage
	if e.db.Opts().InMemory {
		return u, nil
	}
	u.Free, u.Reserve = -1, e.space.reserve
	if f, ok := freeSpace(e.dir); ok {
		u.Free = f
	}
	dirs := []string{e.dir}
	if vd := e.db.Opts().ValueDir; vd != "" && vd != e.dir {
		dirs = append(dirs, vd)
	}
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return Usage{}, err
		}
		for _, en := range entries {
			info, err := en.Info()
			if err != nil || !info.Mode().IsRegular() {
				continue // removed meanwhile (compaction), or not a file
			}
			n := allocated(info)
			switch {
			case filepath.Ext(en.Name()) == ".sst":
				u.Tables += n
			case filepath.Ext(en.Name()) == ".vlog":
				u.ValueLog += n
			case en.Name() == LogName:
				u.Log += n
			}
			u.Total += n
		}
	}
	return u, nil
}
