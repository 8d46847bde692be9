package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

const (
	magic       = "idemwal2" // frames on block boundaries
	magicV1     = "idemwal1" // frames end to end (earlier releases)
	headerLen   = 4096       // the header has a block to itself
	frameHead   = 24         // length, checksum, generation, sequence
	maxFrame    = 1 << 30    // a larger length field is not a frame
	kindSet     = byte(1)
	kindDelete  = byte(2)
	zeroChunk   = 1 << 20
	minOutBlock = 16
)

// BlockSize is the frame alignment, and O_DIRECT's.
const BlockSize = 4096

// InitialSize is the size a new log is written to in full, then reused.
const InitialSize = 8 << 20

// ErrCorrupt is returned by Open when the file is not a log (bad magic),
// is truncated, holds a frame whose checksum matches but whose payload
// cannot be read, or holds a damaged frame (or header) followed by intact
// frames of its generation.
var ErrCorrupt = errors.New("wal: corrupt log")

// errDirectRefused is a direct write the system refused as invalid: the
// log falls back to buffered writes.
var errDirectRefused = errors.New("direct write refused")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Entry is one write of a frame. Value and ExpiresAt are unused for a
// deletion.
type Entry struct {
	Key, Value []byte
	Delete     bool
	ExpiresAt  uint64
}

// Options configure Open. The zero value writes frames with O_DIRECT
// where the file system allows it.
type Options struct {
	// Buffered writes frames through the page cache and fdatasync even
	// where O_DIRECT works (tests of the fallback).
	Buffered bool
}

// Log is an open log. Only one goroutine may use it at a time.
type Log struct {
	path string
	f    *os.File
	gen  uint64 // current generation
	seq  uint64 // sequence number of the next frame
	off  int64  // where the next frame goes
	size int64  // bytes of the file written at least once
	buf  []byte // frame being built, reused
	// align is where frames start: every BlockSize bytes, or anywhere in
	// a log of the earlier layout (1), until its first Reset.
	align int64
	// direct writes frames with O_DIRECT|O_DSYNC (nil: f and fdatasync);
	// out is the block-aligned buffer such writes go through.
	direct *directFile
	out    []byte
}

// Open opens the log at path, creating it (written in full, synced) if
// absent. It returns the entries of the current generation's frames, in
// order, which the caller must apply and make durable before Reset.
func Open(path string, o Options) (*Log, [][]Entry, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		l, err := create(path, o)
		return l, nil, err
	}
	if err != nil {
		return nil, nil, err
	}
	l, frames, err := load(path, f, false)
	if err != nil {
		return nil, nil, err
	}
	l.openDirect(o)
	return l, frames, nil
}

// Pending counts the frames an Open would return, writing nothing; a
// missing log has none.
func Pending(path string) (int, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	l, frames, err := load(path, f, true)
	if err != nil {
		return 0, err
	}
	_ = l.Close()
	return len(frames), nil
}

func load(path string, f *os.File, ro bool) (*Log, [][]Entry, error) {
	l := &Log{path: path, f: f}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	l.size = info.Size()
	frames, err := l.read(ro)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return l, frames, nil
}

func create(path string, o Options) (*Log, error) {
	tmp := path + ".new"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	l := &Log{path: path, f: f, gen: 1, off: headerLen, align: BlockSize}
	fail := func(err error) (*Log, error) {
		f.Close()
		// Not left behind: on a full disk it holds what was written.
		_ = os.Remove(tmp)
		return nil, err
	}
	// Write every block once, so that later writes overwrite allocated
	// blocks and a sync has no allocation to commit.
	zero := make([]byte, zeroChunk)
	for off := int64(0); off < InitialSize; off += int64(len(zero)) {
		if _, err := f.WriteAt(zero, off); err != nil {
			return fail(err)
		}
	}
	l.size = InitialSize
	if err := l.writeHeader(); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(err)
	}
	if err := SyncDir(filepath.Dir(path)); err != nil {
		return fail(err)
	}
	l.openDirect(o)
	return l, nil
}

// openDirect opens the log a second time for O_DIRECT|O_DSYNC frame
// writes, where the system and file system allow it.
func (l *Log) openDirect(o Options) {
	if o.Buffered {
		return
	}
	if d, ok := openDirectFile(l.path); ok {
		l.direct = d
	}
}

// writeHeader writes and syncs the header of the current generation.
func (l *Log) writeHeader() error {
	var h [32]byte
	copy(h[:8], magic)
	binary.LittleEndian.PutUint64(h[8:16], l.gen)
	binary.LittleEndian.PutUint32(h[16:20], crc32.Checksum(h[:16], castagnoli))
	if _, err := l.f.WriteAt(h[:], 0); err != nil {
		return err
	}
	return SyncData(l.f)
}

// read parses the header and the current generation's frames. ro writes
// nothing, even over a torn header.
func (l *Log) read(ro bool) ([][]Entry, error) {
	var h [32]byte
	if _, err := l.f.ReadAt(h[:], 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	switch string(h[:8]) {
	case magic:
		l.align = BlockSize
	case magicV1:
		l.align = 1
	default:
		return nil, fmt.Errorf("%w: %s: not an idem log (bad magic)", ErrCorrupt, l.path)
	}
	l.gen = binary.LittleEndian.Uint64(h[8:16])
	l.off = headerLen
	if crc32.Checksum(h[:16], castagnoli) != binary.LittleEndian.Uint32(h[16:20]) {
		// Only Reset rewrites the header, after the caller made everything
		// durable: a torn header has nothing to replay. Start a generation
		// no frame on disk can carry.
		if l.align == BlockSize {
			if seq, found, err := l.frameAfter(headerLen, 0); err != nil || found {
				if err == nil {
					err = fmt.Errorf("%w: %s: damaged header before intact frame %d of its generation", ErrCorrupt, l.path, seq)
				}
				return nil, err
			}
		}
		l.gen += 1 << 32
		l.align = BlockSize
		if ro {
			return nil, nil
		}
		return nil, l.writeHeader()
	}
	if l.align == BlockSize && (l.size < InitialSize || l.size%BlockSize != 0) {
		// Every log of this layout is written to InitialSize at creation
		// and grows by whole blocks: a shorter one lost its end.
		return nil, fmt.Errorf("%w: %s: truncated to %d bytes (at least %d expected)", ErrCorrupt, l.path, l.size, InitialSize)
	}
	var frames [][]Entry
	for {
		entries, next, err := l.frameAt(l.off)
		if err != nil {
			return frames, err
		}
		if entries == nil {
			return frames, l.checkEnd()
		}
		frames = append(frames, entries)
		l.off = next
		l.seq++
	}
}

// checkEnd is called where the current generation's frames end, at l.off.
// Frames are written one at a time, each durable before the next, so only
// the last one written can be torn: a valid frame of the generation past
// l.off means the frame at l.off was damaged after it was written, and
// replaying up to it would silently drop acknowledged writes.
func (l *Log) checkEnd() error {
	if l.align != BlockSize {
		return nil // the packed layout: frames cannot be found past damage
	}
	seq, found, err := l.frameAfter(l.off+BlockSize, l.seq+1)
	if err != nil || !found {
		return err
	}
	return fmt.Errorf("%w: %s: frame %d is damaged and frame %d after it is intact (not a torn tail)", ErrCorrupt, l.path, l.seq, seq)
}

// frameAfter looks for a frame of the current generation with a sequence
// of at least minSeq and a valid checksum, on a block boundary at or past
// off.
func (l *Log) frameAfter(off int64, minSeq uint64) (uint64, bool, error) {
	chunk := make([]byte, zeroChunk)
	for base := alignUp(off, BlockSize); base < l.size; base += zeroChunk {
		n, err := l.f.ReadAt(chunk, base)
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, false, err
		}
		for b := 0; b+frameHead <= n; b += BlockSize {
			head := chunk[b : b+frameHead]
			size := int64(binary.LittleEndian.Uint32(head[0:4]))
			gen := binary.LittleEndian.Uint64(head[8:16])
			seq := binary.LittleEndian.Uint64(head[16:24])
			at := base + int64(b)
			if size == 0 || size > maxFrame || gen != l.gen || seq < minSeq || at+frameHead+size > l.size {
				continue
			}
			frame := make([]byte, frameHead+size)
			if _, err := l.f.ReadAt(frame, at); err != nil {
				return 0, false, err
			}
			if frameSum(frame) == binary.LittleEndian.Uint32(frame[4:8]) {
				return seq, true, nil
			}
		}
	}
	return 0, false, nil
}

// frameAt reads the frame at off. It returns nil entries where the
// current generation ends (a torn or stale frame, or the end of the file),
// and the offset of the next frame.
func (l *Log) frameAt(off int64) ([]Entry, int64, error) {
	head := make([]byte, frameHead)
	if _, err := l.f.ReadAt(head, off); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, 0, nil
		}
		return nil, 0, err
	}
	n := int64(binary.LittleEndian.Uint32(head[0:4]))
	gen := binary.LittleEndian.Uint64(head[8:16])
	seq := binary.LittleEndian.Uint64(head[16:24])
	if n == 0 || n > maxFrame || gen != l.gen || seq != l.seq || off+frameHead+n > l.size {
		return nil, 0, nil
	}
	frame := make([]byte, frameHead+n)
	if _, err := l.f.ReadAt(frame, off); err != nil {
		return nil, 0, err
	}
	if frameSum(frame) != binary.LittleEndian.Uint32(frame[4:8]) {
		return nil, 0, nil
	}
	entries, err := decodeEntries(frame[frameHead:])
	if err != nil {
		// The checksum matched: not a torn write but bytes this code
		// cannot read. Refuse rather than drop writes.
		return nil, 0, fmt.Errorf("%w: %s frame %d: %v", ErrCorrupt, l.path, seq, err)
	}
	return entries, alignUp(off+frameHead+n, l.align), nil
}

func frameSum(frame []byte) uint32 {
	c := crc32.Update(0, castagnoli, frame[0:4])
	return crc32.Update(c, castagnoli, frame[8:])
}

func decodeEntries(p []byte) ([]Entry, error) {
	var out []Entry
	for len(p) > 0 {
		kind := p[0]
		p = p[1:]
		var e Entry
		var ok bool
		if e.Key, p, ok = uvarintBytes(p); !ok {
			return nil, errors.New("truncated key")
		}
		switch kind {
		case kindSet:
			if e.Value, p, ok = uvarintBytes(p); !ok {
				return nil, errors.New("truncated value")
			}
			x, n := binary.Uvarint(p)
			if n <= 0 {
				return nil, errors.New("truncated expiry")
			}
			e.ExpiresAt, p = x, p[n:]
		case kindDelete:
			e.Delete = true
		default:
			return nil, fmt.Errorf("entry kind %d", kind)
		}
		out = append(out, e)
	}
	return out, nil
}

func uvarintBytes(p []byte) (b, rest []byte, ok bool) {
	n, k := binary.Uvarint(p)
	if k <= 0 || n > uint64(len(p)-k) {
		return nil, p, false
	}
	return p[k : k+int(n)], p[k+int(n):], true
}

// Begin starts a frame.
func (l *Log) Begin() {
	l.buf = append(l.buf[:0], make([]byte, frameHead)...)
}

// Add appends e to the frame being built.
func (l *Log) Add(e Entry) {
	if e.Delete {
		l.buf = append(l.buf, kindDelete)
		l.buf = binary.AppendUvarint(l.buf, uint64(len(e.Key)))
		l.buf = append(l.buf, e.Key...)
		return
	}
	l.buf = append(l.buf, kindSet)
	l.buf = binary.AppendUvarint(l.buf, uint64(len(e.Key)))
	l.buf = append(l.buf, e.Key...)
	l.buf = binary.AppendUvarint(l.buf, uint64(len(e.Value)))
	l.buf = append(l.buf, e.Value...)
	l.buf = binary.AppendUvarint(l.buf, e.ExpiresAt)
}

// Full reports whether the frame being built no longer fits after the
// frames already written, or the log is of the earlier layout: the caller
// applies what it logged, makes it durable and calls Reset first.
func (l *Log) Full() bool {
	return (l.off+alignUp(int64(len(l.buf)), BlockSize) > l.size && l.off > headerLen) || l.align != BlockSize
}

// alignUp rounds n up to a multiple of a.
func alignUp(n, a int64) int64 { return (n + a - 1) / a * a }

// Commit writes the frame being built and makes it durable. A frame
// larger than the whole log grows the file (that one sync then also
// commits the new size).
func (l *Log) Commit() error {
	l.seal()
	end := l.off + alignUp(int64(len(l.buf)), BlockSize)
	if err := l.write(); err != nil {
		return err
	}
	l.off = end
	l.size = max(l.size, l.off)
	l.seq++
	return nil
}

// seal fills in the head of the frame being built.
func (l *Log) seal() {
	n := len(l.buf) - frameHead
	binary.LittleEndian.PutUint32(l.buf[0:4], uint32(n))
	binary.LittleEndian.PutUint64(l.buf[8:16], l.gen)
	binary.LittleEndian.PutUint64(l.buf[16:24], l.seq)
	binary.LittleEndian.PutUint32(l.buf[4:8], frameSum(l.buf))
}

// write makes the frame being built durable at l.off: one O_DIRECT|O_DSYNC
// write of whole blocks (the padding after the frame is zero), or a
// buffered write and fdatasync. If the direct write is refused as
// invalid, the log falls back to buffered writes for good.
func (l *Log) write() error {
	if l.direct != nil {
		n := int(alignUp(int64(len(l.buf)), BlockSize))
		if cap(l.out) < n {
			l.out = alignedBlocks(max(n, minOutBlock*BlockSize))
		}
		out := l.out[:n]
		clear(out[copy(out, l.buf):])
		err := l.direct.writeAt(out, l.off)
		if !errors.Is(err, errDirectRefused) {
			return err
		}
		l.direct.close()
		l.direct = nil
	}
	if _, err := l.f.WriteAt(l.buf, l.off); err != nil {
		return err
	}
	return SyncData(l.f)
}

// Reset starts a new generation: every frame on disk becomes stale. The
// caller has made durable what the frames were applied to.
func (l *Log) Reset() error {
	l.gen++
	l.seq = 0
	l.off = headerLen
	l.align = BlockSize
	return l.writeHeader()
}

// Close closes the log; later writes fail.
func (l *Log) Close() error {
	if l.direct != nil {
		l.direct.close()
	}
	return l.f.Close()
}

// Generation returns the current generation.
func (l *Log) Generation() uint64 { return l.gen }

// Offset returns where the next frame goes.
func (l *Log) Offset() int64 { return l.off }

// Size returns the bytes of the file written at least once.
func (l *Log) Size() int64 { return l.size }

// FrameLen returns the length of the last frame built, head included and
// padding excluded.
func (l *Log) FrameLen() int { return len(l.buf) }

// Direct reports whether frames are written with O_DIRECT.
func (l *Log) Direct() bool { return l.direct != nil }

// SyncDir makes the entries of dir durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
