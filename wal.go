package idem

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/dgraph-io/badger/v4"
)

// The Durable Badger backend's own write-ahead log.
//
// Badger under SyncWrites syncs each commit by msync-ing its memtable log
// and its value log, files it grows into fresh (sparse) pages: every sync
// also commits file-system metadata, and one synced commit costs two to
// three times a plain fdatasync. So under Durable, Badger runs unsynced
// and the committer makes each group durable in a log of its own first:
// one pwrite and one fdatasync into blocks written beforehand, so that the
// sync flushes data and nothing else.
//
// The order of one group (commitGroup): the ops run against a Badger
// transaction; their writes are framed and appended to this log; the log
// is synced; only then is the transaction committed (unsynced) and the ops
// answered. Readers see a write only once it is durable.
//
// Checkpoints: when the log is full (and on Close), the committer syncs
// Badger's own files (every memtable log and value log, and the directory)
// and starts a new generation of this log from its beginning. Tables that
// Badger flushes from memtables are synced by Badger itself. Everything
// before a checkpoint is thus durable in Badger; everything after it is in
// this log.
//
// Recovery: on open, before anything reads the records, the frames of the
// current generation are applied to Badger again, in order, and a
// checkpoint is taken. A frame holds whole values (no read-modify-write),
// and the committer is the only writer, so applying a run of frames that
// Badger already holds, in the same order, leaves the same state: replay
// is idempotent. The scan stops at the first frame whose length, checksum,
// generation or sequence number does not fit: the torn tail of a crash, or
// a frame of an earlier generation that was not overwritten.
//
// Layout: a header block (magic, generation, checksum) followed by frames:
//
//	length u32 | crc32c u32 | generation u64 | sequence u64 | payload
//
// where the checksum covers everything after itself and the length. Each
// frame starts on a 4 KiB boundary (logs written by earlier releases,
// magic "idemwal1", pack frames end to end; they are replayed as such,
// and the checkpoint after the replay starts the new layout): on Linux
// a frame is written with O_DIRECT|O_DSYNC, one aligned write that the
// disk makes durable by itself (a FUA write, or a write and a cache
// flush), with no fdatasync after it. On the disks measured this costs
// about a fifth less than a buffered write and an fdatasync, and no
// acknowledged block is ever written again within a generation. Where
// O_DIRECT is refused, frames are written through the page cache and
// synced with fdatasync. The payload is a sequence of entries:
//
//	0x01 | uvarint key length | key | uvarint value length | value | uvarint expiresAt
//	0x02 | uvarint key length | key                                  (a deletion)

const (
	walName      = "idem.wal"
	walMagic     = "idemwal2" // frames on block boundaries
	walMagicV1   = "idemwal1" // frames end to end (earlier releases)
	walBlock     = 4096       // frame alignment, and O_DIRECT's
	walHeaderLen = 4096       // the header has a block to itself
	walSize      = 8 << 20    // written in full when created, then reused
	walFrameHead = 24         // length, checksum, generation, sequence
	walMaxFrame  = 1 << 30    // a larger length field is not a frame
	walSet       = byte(1)    // entry kinds
	walDelete    = byte(2)    //
	walChunk     = 64 << 10   // checkpoint replay batches at most this many bytes per transaction
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// walDirect lets tests turn off O_DIRECT frame writes, to run the
// buffered path where the file system supports both.
var walDirect = true

// errDirectRefused is a direct write the system refused as invalid: the
// log falls back to buffered writes.
var errDirectRefused = errors.New("direct write refused")

// wal is the log; only the committer (and open) use it.
type wal struct {
	dir  string // Badger's directory, synced at checkpoints
	f    *os.File
	gen  uint64 // current generation
	seq  uint64 // sequence number of the next frame
	off  int64  // where the next frame goes
	size int64  // bytes of the file written at least once
	buf  []byte // frame being built, reused
	ro   bool   // opened to count frames only
	// align is where frames start: every walBlock bytes, or anywhere in
	// a log of the earlier layout (1), until its first checkpoint.
	align int64
	// direct writes frames with O_DIRECT|O_DSYNC (nil: f and fdatasync);
	// out is the block-aligned buffer such writes go through.
	direct *directFile
	out    []byte
}

// walEntry is one write of a frame.
type walEntry struct {
	del       bool
	key, val  []byte
	expiresAt uint64
}

// openWAL opens the log in dir, creating it (written in full, synced) if
// absent. It returns the log and the entries of the current generation's
// frames, in order, which the caller must apply to Badger and then
// checkpoint.
func openWAL(dir string) (*wal, [][]walEntry, error) {
	path := filepath.Join(dir, walName)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		w, err := createWAL(dir, path)
		return w, nil, err
	}
	return readWAL(dir, f, err, false)
}

// pendingWAL counts the frames a read-only open would leave unapplied,
// without writing anything; a missing log has none.
func pendingWAL(dir string) (int, error) {
	f, err := os.Open(filepath.Join(dir, walName))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	w, frames, err := readWAL(dir, f, err, true)
	if err != nil {
		return 0, err
	}
	w.close()
	return len(frames), nil
}

func readWAL(dir string, f *os.File, err error, ro bool) (*wal, [][]walEntry, error) {
	if err != nil {
		return nil, nil, err
	}
	w := &wal{dir: dir, f: f, ro: ro}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	w.size = info.Size()
	frames, err := w.read()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !ro {
		w.openDirect(f.Name())
	}
	return w, frames, nil
}

func createWAL(dir, path string) (*wal, error) {
	tmp := path + ".new"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	w := &wal{dir: dir, f: f, gen: 1, off: walHeaderLen, align: walBlock}
	// Write every block once, so that later writes overwrite allocated
	// blocks and a sync has no allocation to commit.
	zero := make([]byte, 1<<20)
	for off := int64(0); off < walSize; off += int64(len(zero)) {
		if _, err := f.WriteAt(zero, off); err != nil {
			f.Close()
			return nil, err
		}
	}
	w.size = walSize
	if err := w.writeHeader(); err != nil {
		f.Close()
		return nil, err
	}
	if err := os.Rename(tmp, path); err != nil {
		f.Close()
		return nil, err
	}
	if err := syncDir(dir); err != nil {
		f.Close()
		return nil, err
	}
	w.openDirect(path)
	return w, nil
}

// openDirect opens the log a second time for O_DIRECT|O_DSYNC frame
// writes, where the system and file system allow it.
func (w *wal) openDirect(path string) {
	if !walDirect {
		return
	}
	if d, ok := openDirectFile(path); ok {
		w.direct = d
	}
}

// writeHeader writes and syncs the header of the current generation.
func (w *wal) writeHeader() error {
	var h [32]byte
	copy(h[:8], walMagic)
	binary.LittleEndian.PutUint64(h[8:16], w.gen)
	binary.LittleEndian.PutUint32(h[16:20], crc32.Checksum(h[:16], castagnoli))
	if _, err := w.f.WriteAt(h[:], 0); err != nil {
		return err
	}
	return fdatasync(w.f)
}

// read parses the header and the current generation's frames.
func (w *wal) read() ([][]walEntry, error) {
	var h [32]byte
	if _, err := w.f.ReadAt(h[:], 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	switch string(h[:8]) {
	case walMagic:
		w.align = walBlock
	case walMagicV1:
		w.align = 1
	default:
		return nil, fmt.Errorf("%w: %s: not an idem log (bad magic)", ErrCorrupt, filepath.Join(w.dir, walName))
	}
	w.gen = binary.LittleEndian.Uint64(h[8:16])
	w.off = walHeaderLen
	if crc32.Checksum(h[:16], castagnoli) != binary.LittleEndian.Uint32(h[16:20]) {
		// Only a checkpoint rewrites the header, and it does so after
		// Badger holds everything: a torn header has nothing to replay.
		// Start a generation no frame on disk can carry.
		w.gen = w.gen + 1<<32
		w.align = walBlock
		if w.ro {
			return nil, nil
		}
		return nil, w.writeHeader()
	}
	var frames [][]walEntry
	head := make([]byte, walFrameHead)
	for {
		if _, err := w.f.ReadAt(head, w.off); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, err
		}
		n := int64(binary.LittleEndian.Uint32(head[0:4]))
		gen := binary.LittleEndian.Uint64(head[8:16])
		seq := binary.LittleEndian.Uint64(head[16:24])
		if n == 0 || n > walMaxFrame || gen != w.gen || seq != w.seq || w.off+walFrameHead+n > w.size {
			break
		}
		frame := make([]byte, walFrameHead+n)
		if _, err := w.f.ReadAt(frame, w.off); err != nil {
			return nil, err
		}
		if frameSum(frame) != binary.LittleEndian.Uint32(frame[4:8]) {
			break
		}
		entries, err := decodeEntries(frame[walFrameHead:])
		if err != nil {
			// The checksum matched: this is not a torn write but bytes
			// this code cannot read. Refuse rather than drop writes.
			return nil, fmt.Errorf("%w: %s frame %d: %v", ErrCorrupt, walName, seq, err)
		}
		frames = append(frames, entries)
		w.off = alignUp(w.off+walFrameHead+n, w.align)
		w.seq++
	}
	return frames, nil
}

func frameSum(frame []byte) uint32 {
	c := crc32.Update(0, castagnoli, frame[0:4])
	return crc32.Update(c, castagnoli, frame[8:])
}

func decodeEntries(p []byte) ([]walEntry, error) {
	var out []walEntry
	for len(p) > 0 {
		kind := p[0]
		p = p[1:]
		var e walEntry
		var ok bool
		if e.key, p, ok = walBytes(p); !ok {
			return nil, errors.New("truncated key")
		}
		switch kind {
		case walSet:
			if e.val, p, ok = walBytes(p); !ok {
				return nil, errors.New("truncated value")
			}
			x, n := binary.Uvarint(p)
			if n <= 0 {
				return nil, errors.New("truncated expiry")
			}
			e.expiresAt, p = x, p[n:]
		case walDelete:
			e.del = true
		default:
			return nil, fmt.Errorf("entry kind %d", kind)
		}
		out = append(out, e)
	}
	return out, nil
}

func walBytes(p []byte) (b, rest []byte, ok bool) {
	n, k := binary.Uvarint(p)
	if k <= 0 || n > uint64(len(p)-k) {
		return nil, p, false
	}
	return p[k : k+int(n)], p[k+int(n):], true
}

// begin starts a frame.
func (w *wal) begin() {
	w.buf = append(w.buf[:0], make([]byte, walFrameHead)...)
}

// add appends an op's buffered writes to the frame being built.
func (w *wal) add(t *wtxn) {
	t.each(func(key, val []byte, del bool, expiresAt uint64) {
		if del {
			w.buf = append(w.buf, walDelete)
			w.buf = binary.AppendUvarint(w.buf, uint64(len(key)))
			w.buf = append(w.buf, key...)
			return
		}
		w.buf = append(w.buf, walSet)
		w.buf = binary.AppendUvarint(w.buf, uint64(len(key)))
		w.buf = append(w.buf, key...)
		w.buf = binary.AppendUvarint(w.buf, uint64(len(val)))
		w.buf = append(w.buf, val...)
		w.buf = binary.AppendUvarint(w.buf, expiresAt)
	})
}

// full reports whether the frame being built no longer fits after the
// frames already written, or the log is of the earlier layout: the caller
// checkpoints first.
func (w *wal) full() bool {
	return (w.off+alignUp(int64(len(w.buf)), walBlock) > w.size && w.off > walHeaderLen) || w.align != walBlock
}

// alignUp rounds n up to a multiple of a.
func alignUp(n, a int64) int64 { return (n + a - 1) / a * a }

// commit writes the frame being built and syncs it. A frame larger than
// the whole log grows the file (that one sync then also commits the new
// size).
func (w *wal) commit() error {
	w.seal()
	end := w.off + alignUp(int64(len(w.buf)), walBlock)
	if err := w.write(); err != nil {
		return err
	}
	w.off = end
	w.size = max(w.size, w.off)
	w.seq++
	return nil
}

// seal fills in the head of the frame being built.
func (w *wal) seal() {
	n := len(w.buf) - walFrameHead
	binary.LittleEndian.PutUint32(w.buf[0:4], uint32(n))
	binary.LittleEndian.PutUint64(w.buf[8:16], w.gen)
	binary.LittleEndian.PutUint64(w.buf[16:24], w.seq)
	binary.LittleEndian.PutUint32(w.buf[4:8], frameSum(w.buf))
}

// write makes the frame being built durable at w.off: one O_DIRECT|O_DSYNC
// write of whole blocks (the padding after the frame is zero), or a
// buffered write and fdatasync. If the direct write is refused as
// invalid, the log falls back to buffered writes for good.
func (w *wal) write() error {
	if w.direct != nil {
		n := int(alignUp(int64(len(w.buf)), walBlock))
		if cap(w.out) < n {
			w.out = alignedBlocks(max(n, 16*walBlock))
		}
		out := w.out[:n]
		clear(out[copy(out, w.buf):])
		err := w.direct.writeAt(out, w.off)
		if !errors.Is(err, errDirectRefused) {
			return err
		}
		w.direct.close()
		w.direct = nil
	}
	if _, err := w.f.WriteAt(w.buf, w.off); err != nil {
		return err
	}
	return fdatasync(w.f)
}

// reset starts a new generation: every frame on disk becomes stale. The
// caller has made Badger durable first.
func (w *wal) reset() error {
	w.gen++
	w.seq = 0
	w.off = walHeaderLen
	w.align = walBlock
	return w.writeHeader()
}

func (w *wal) close() error {
	if w.direct != nil {
		w.direct.close()
	}
	return w.f.Close()
}

// syncBadgerFiles makes every write Badger has accepted durable: the
// active memtable's log and the value log through Badger, then every
// memtable log and value-log file in the directory (immutable memtables
// not yet flushed to tables, older value logs), then the directory.
func syncBadgerFiles(db *badger.DB, dir string) error {
	if err := db.Sync(); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !(strings.HasSuffix(name, ".mem") || strings.HasSuffix(name, ".vlog")) {
			continue
		}
		f, err := os.Open(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue // flushed to a table (synced by Badger) and removed
		}
		if err != nil {
			return err
		}
		err = fdatasync(f)
		f.Close()
		if err != nil {
			return err
		}
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// applyFrames writes replayed frames into Badger, in order, committing
// every walChunk bytes or so, and whenever a transaction is full.
func applyFrames(db *badger.DB, frames [][]walEntry) error {
	txn := db.NewTransaction(true)
	defer func() { txn.Discard() }()
	bytes := 0
	for _, f := range frames {
		for _, e := range f {
			err := setEntry(txn, e)
			if bytes > walChunk || errors.Is(err, badger.ErrTxnTooBig) {
				if cerr := txn.Commit(); cerr != nil {
					return cerr
				}
				txn, bytes = db.NewTransaction(true), 0
				if err != nil {
					err = setEntry(txn, e)
				}
			}
			if err != nil {
				return err
			}
			bytes += len(e.key) + len(e.val) + 16
		}
	}
	return txn.Commit()
}

func setEntry(txn *badger.Txn, e walEntry) error {
	if e.del {
		return txn.Delete(e.key)
	}
	ne := badger.NewEntry(e.key, e.val)
	ne.ExpiresAt = e.expiresAt
	return txn.SetEntry(ne)
}
