package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/idemkit/idem/internal/badger"
	"github.com/idemkit/idem/internal/badger/pb"
	"github.com/idemkit/idem/internal/wal"
	"google.golang.org/protobuf/proto"
)

// RestoringName is the file Restore keeps in a directory while it loads a
// backup into it: Open refuses a directory that holds one, so that a
// restore cut short (a kill, a full disk) is never taken for a store.
const RestoringName = "idem.restoring"

// ErrNotEmpty is returned by Restore when the directory holds files.
var ErrNotEmpty = errors.New("engine: directory not empty")

// backupBatch bounds the bytes of keys and values in one list of the
// backup stream, and so what Backup holds in memory.
const backupBatch = 1 << 20

// Backup writes, in Badger's backup format (what DB.Backup writes and
// DB.Load reads), the latest value of every key the store holds to w,
// and returns the highest version in it.
//
// The cut is consistent and holds every write answered before Backup was
// called: settle first waits until Badger holds every unit the log made
// durable (under Durable an op is answered once its unit is in the log,
// before Badger has it); then one read transaction, begun after that,
// reads the whole keyspace. It reads the memtables too, so nothing need
// be flushed, and the log holds nothing answered that the transaction
// lacks. A unit is one Badger transaction, so the snapshot holds a
// prefix of the units, each whole: every claim's record with its claim
// index entry and the token counter written with it. Writes go on
// meanwhile; later ones are not in it.
//
// Badger's own Stream is not used: it gives each of its producers a
// transaction of its own, begun at its own moment (the cut would differ
// by key range), and buffers up to 32 lists of 16 MiB for a slow writer.
// Deleted and expired keys and older versions are left out: a restore
// into an empty directory has no use for them.
func (e *Engine) Backup(ctx context.Context, w io.Writer) (uint64, error) {
	e.settle()
	if err := e.brokenErr(); err != nil {
		// Badger may lack units the log holds: only a reopen applies them.
		return 0, err
	}
	txn := e.db.NewTransaction(false)
	defer txn.Discard()
	it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: true, PrefetchSize: 64})
	defer it.Close()
	var list pb.KVList
	var top uint64
	size := 0
	for it.Rewind(); it.Valid(); it.Next() {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		item := it.Item()
		kv := &pb.KV{Key: item.KeyCopy(nil), Version: item.Version(), ExpiresAt: item.ExpiresAt(),
			UserMeta: []byte{item.UserMeta()}}
		var err error
		if kv.Value, err = item.ValueCopy(nil); err != nil {
			return 0, err
		}
		list.Kv = append(list.Kv, kv)
		top = max(top, kv.Version)
		if size += len(kv.Key) + len(kv.Value); size >= backupBatch {
			if err := writeList(w, &list); err != nil {
				return 0, err
			}
			size = 0
		}
	}
	return top, writeList(w, &list)
}

// writeList writes list as DB.Backup does (its length, little-endian,
// then the protobuf) and empties it.
func writeList(w io.Writer, list *pb.KVList) error {
	if len(list.Kv) == 0 {
		return nil
	}
	buf, err := proto.Marshal(list)
	if err != nil {
		return err
	}
	list.Kv = list.Kv[:0]
	if _, err := w.Write(binary.LittleEndian.AppendUint64(nil, uint64(len(buf)))); err != nil {
		return err
	}
	_, err = w.Write(buf)
	return err
}

// StoreID returns the store's identity (hex) as its mark records it; ""
// for a store in memory or one that has not taken its first checkpoint.
func (e *Engine) StoreID() string { return e.mark.Store }

// CheckEmpty returns ErrNotEmpty if dir exists and holds anything.
func CheckEmpty(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, en := range entries {
		if en.Name() != LockName {
			return fmt.Errorf("%w: %s holds %s", ErrNotEmpty, dir, en.Name())
		}
	}
	return nil
}

// Restore loads Badger's backup stream r into bo.Dir, which must be empty
// or absent, under the directory lock. The store identity in the stream
// is dropped, so the next Open makes a new one with a new mark: a restored
// store is a new store (its mark starts afresh, and a mark of the store
// backed up never matches it). Open refuses the directory until Restore
// succeeded; if it fails, it empties the directory again. The caller
// opens the result to finish it (the mark, the log, orphaning the open
// claims the backup holds).
func Restore(bo badger.Options, r io.Reader) (err error) {
	dir := bo.Dir
	if bo.InMemory || bo.ReadOnly || (bo.ValueDir != "" && bo.ValueDir != dir) {
		return errors.New("engine: restore needs one directory, opened for writing")
	}
	if err := CheckEmpty(dir); err != nil {
		return err
	}
	lock, err := lockDir(dir, false)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, emptyDir(dir))
		}
		lock.Close()
	}()
	// Again under the lock: an Open or a Restore may have come first.
	if err := CheckEmpty(dir); err != nil {
		return err
	}
	if err := writeSynced(filepath.Join(dir, RestoringName)); err != nil {
		return err
	}
	if err := load(bo, r); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(dir, RestoringName)); err != nil {
		return err
	}
	return wal.SyncDir(dir)
}

// load opens Badger alone (no log, no mark), loads r, removes the mark
// key the stream carried, and closes Badger with everything synced.
func load(bo badger.Options, r io.Reader) error {
	db, err := openBadger(bo)
	if err != nil {
		return err
	}
	err = db.Load(r, 16)
	if err == nil {
		err = db.Update(func(txn *badger.Txn) error { return txn.Delete(markKey) })
	}
	if err == nil {
		err = syncBadgerFiles(db, bo.Dir)
	}
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	return err
}

// checkRestoring refuses a directory a Restore has not finished.
func checkRestoring(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, RestoringName)); err == nil {
		return fmt.Errorf("%w: %s: a restore into %s did not finish; empty the directory and restore again", ErrCorrupt, RestoringName, dir)
	}
	return nil
}

// writeSynced creates an empty file and syncs it and its directory.
func writeSynced(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	err = wal.SyncData(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = wal.SyncDir(filepath.Dir(path))
	}
	return err
}

// emptyDir removes what a failed Restore left in dir, but the lock (still
// held) and the marker, which goes last so that a crash meanwhile leaves
// the directory refused, not half a store.
func emptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, en := range entries {
		if n := en.Name(); n != LockName && n != RestoringName {
			errs = append(errs, os.RemoveAll(filepath.Join(dir, n)))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(dir, RestoringName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return os.Remove(filepath.Join(dir, LockName))
}
