package engine

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/idemkit/idem/internal/badger"
	"github.com/idemkit/idem/internal/wal"
)

// MarkName is the file, beside Badger's, in which the engine keeps its
// high-water mark: what the directory held at its last checkpoint, so
// that an open can tell when Badger comes back with less.
const MarkName = "idem.mark"

// markKey holds, in Badger, the store's identity (16 bytes) and the
// number of its last checkpoint (8, big-endian). It is rewritten at every
// checkpoint, so compaction never drops it; losing it means losing the
// tables or logs that held the latest checkpoint.
var markKey = []byte("s/engine/mark")

// mark is the high-water mark, written (synced) after every checkpoint.
type mark struct {
	// Store identifies the directory's data: a mark and a Badger of
	// different stores do not belong together.
	Store string `json:"store"`
	// Checkpoint is the number of the last checkpoint Badger made durable.
	Checkpoint uint64 `json:"checkpoint"`
	// Log says a log was created in the directory: it must not vanish.
	Log bool `json:"log"`
}

func readMark(dir string) (*mark, error) {
	raw, err := os.ReadFile(filepath.Join(dir, MarkName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var m mark
	if err := json.Unmarshal(raw, &m); err != nil || len(m.Store) != 32 {
		return nil, fmt.Errorf("%w: %s is damaged", ErrCorrupt, MarkName)
	}
	return &m, nil
}

// writeMark replaces the mark durably: a new file, synced, renamed over
// the old one, and the directory synced.
func writeMark(dir string, m mark) error {
	raw, err := json.Marshal(m)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, MarkName+".new")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(append(raw, '\n'))
	if err == nil {
		err = wal.SyncData(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, MarkName))
	}
	if err == nil {
		err = wal.SyncDir(dir)
	}
	return err
}

// storedMark reads the store identity and checkpoint number Badger holds.
func storedMark(db *badger.DB) (id []byte, n uint64, err error) {
	err = db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(markKey)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return item.Value(func(v []byte) error {
			if len(v) != 24 {
				return fmt.Errorf("%w: mark of %d bytes in Badger", ErrCorrupt, len(v))
			}
			id, n = bytes.Clone(v[:16]), binary.BigEndian.Uint64(v[16:])
			return nil
		})
	})
	return id, n, err
}

// checkMark compares what Badger holds with the mark: it refuses a Badger
// that lost its latest checkpoint (a lost or truncated MANIFEST, a lost
// table or log) or belongs to another store, and a directory that lost
// its log.
func (e *Engine) checkMark(m *mark) error {
	if m == nil {
		return nil
	}
	id, n, err := storedMark(e.db)
	if err != nil {
		return err
	}
	switch {
	case id == nil && m.Checkpoint == 0:
		// A new store before its first checkpoint (firstMark): its log
		// holds everything.
	case id == nil:
		return fmt.Errorf("%w: Badger holds no checkpoint, the mark (%s) says checkpoint %d was made durable: its MANIFEST, tables or logs were lost", ErrCorrupt, MarkName, m.Checkpoint)
	case hex.EncodeToString(id) != m.Store:
		return fmt.Errorf("%w: Badger holds store %x, the mark (%s) names store %s: files of two stores are mixed", ErrCorrupt, id, MarkName, m.Store)
	case n < m.Checkpoint:
		return fmt.Errorf("%w: Badger holds checkpoint %d, the mark (%s) says checkpoint %d was made durable: tables or logs written since were lost", ErrCorrupt, n, MarkName, m.Checkpoint)
	}
	if m.Log {
		if _, err := os.Stat(filepath.Join(e.dir, LogName)); errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: %s is missing, the mark (%s) says the store keeps one: acknowledged writes it held may be lost", ErrCorrupt, LogName, MarkName)
		}
	}
	return nil
}

// advanceMark records a new checkpoint in Badger; once Badger's files are
// synced, saveMark writes the mark to match. On first use it makes up the
// store's identity.
func (e *Engine) advanceMark() error {
	if e.mark.Store == "" {
		id, _, err := storedMark(e.db)
		if err != nil {
			return err
		}
		if id == nil {
			id = make([]byte, 16)
			_, _ = rand.Read(id)
		}
		e.mark.Store = hex.EncodeToString(id)
	}
	id, _ := hex.DecodeString(e.mark.Store)
	v := binary.BigEndian.AppendUint64(id, e.mark.Checkpoint+1)
	if err := e.db.Update(func(txn *badger.Txn) error { return txn.Set(markKey, v) }); err != nil {
		return err
	}
	e.mark.Checkpoint++
	return nil
}

// firstMark writes the mark of a store whose Badger holds no mark yet:
// its identity and checkpoint 0, in the mark file alone. The first
// checkpoint writes it into Badger. Until then the log holds every write,
// and the mark says the log must not vanish; no table is flushed to hold
// the mark of a store that has nothing else.
func (e *Engine) firstMark() error {
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	e.mark = mark{Store: hex.EncodeToString(id)}
	return e.saveMark()
}

func (e *Engine) saveMark() error {
	e.mark.Log = e.mark.Log || e.log != nil
	if err := writeMark(e.dir, e.mark); err != nil {
		return err
	}
	saved := e.mark
	e.saved = &saved
	return nil
}

// LossKey holds, in Badger, what opens under AcceptLoss accepted as lost
// (their messages, one a line) until the store above deletes it, in the
// same write that records how it will treat the keys lost. Written before
// the mark that accepts the loss, it outlives a crash between the two.
const LossKey = "s/engine/loss"

// recordLoss adds what this open accepted as lost to LossKey; markDurable
// then makes it durable with the new mark.
func (e *Engine) recordLoss() error {
	if len(e.lost) == 0 {
		return nil
	}
	return e.db.Update(func(txn *badger.Txn) error {
		var had []byte
		item, err := txn.Get([]byte(LossKey))
		switch {
		case err == nil:
			if had, err = item.ValueCopy(nil); err != nil {
				return err
			}
			had = append(had, '\n')
		case !errors.Is(err, badger.ErrKeyNotFound):
			return err
		}
		return txn.Set([]byte(LossKey), append(had, strings.Join(e.lost, "\n")...))
	})
}
