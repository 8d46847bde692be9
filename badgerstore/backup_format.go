package badgerstore

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"time"

	"github.com/idemkit/idem/backend"
)

// The backup file (format 1) wraps a stream in Badger's backup format
// (what DB.Backup writes and DB.Load reads) so that a restore can refuse
// a foreign, damaged or cut-short file before Badger reads a byte of it:
//
//	magic "IDEMBACK" | format uint16 | header length uint32 | header JSON | CRC-32C of all before
//	chunks: length uint32 (1..backupChunk) | CRC-32C of the data | data
//	end:    uint32 0 | stream bytes uint64 | SHA-256 of every byte before it
//
// Integers are big-endian. Every chunk is checked before Badger reads it,
// so a flipped bit never reaches Badger's decoder (whose length prefixes
// would otherwise ask for any amount of memory); the end proves that
// nothing was cut off.
const (
	backupMagic  = "IDEMBACK"
	backupFormat = 1
	backupChunk  = 1 << 20
	maxHeader    = 64 << 10
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// backupHeader is the JSON header of a backup file.
type backupHeader struct {
	Store string    `json:"store"`
	Time  time.Time `json:"time"`
	// Stream names what the chunks carry.
	Stream string `json:"stream"`
}

const badgerStream = "badger/v4 DB.Backup"

func corruptBackup(format string, a ...any) error {
	return fmt.Errorf("%w: backup file: %s", backend.ErrCorrupt, fmt.Sprintf(format, a...))
}

// backupWriter writes a backup file: the header at once, then what it is
// given in checksummed chunks, then the end (finish).
type backupWriter struct {
	w     io.Writer
	sum   hash.Hash // of every byte written
	buf   []byte    // the chunk being filled
	n     int64     // bytes written to w
	body  int64     // stream bytes taken
	start time.Time
	store string
	werr  error // w's failure: the destination's, not the store's
}

func newBackupWriter(w io.Writer, h backupHeader) (*backupWriter, error) {
	bw := &backupWriter{w: w, sum: sha256.New(), buf: make([]byte, 0, backupChunk), start: h.Time, store: h.Store}
	js, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	head := append([]byte(backupMagic), 0, 0, 0, 0, 0, 0)
	binary.BigEndian.PutUint16(head[8:], backupFormat)
	binary.BigEndian.PutUint32(head[10:], uint32(len(js)))
	head = append(head, js...)
	head = binary.BigEndian.AppendUint32(head, crc32.Checksum(head, castagnoli))
	return bw, bw.raw(head)
}

func (bw *backupWriter) raw(p []byte) error {
	n, err := bw.w.Write(p)
	bw.sum.Write(p[:n])
	bw.n += int64(n)
	if err != nil && bw.werr == nil {
		bw.werr = err
	}
	return err
}

// Write takes stream bytes; full chunks go out at once.
func (bw *backupWriter) Write(p []byte) (int, error) {
	taken := 0
	for len(p) > 0 {
		k := min(len(p), backupChunk-len(bw.buf))
		bw.buf = append(bw.buf, p[:k]...)
		p, taken = p[k:], taken+k
		if len(bw.buf) == backupChunk {
			if err := bw.flush(); err != nil {
				return taken, err
			}
		}
	}
	return taken, nil
}

func (bw *backupWriter) flush() error {
	if len(bw.buf) == 0 {
		return nil
	}
	var h [8]byte
	binary.BigEndian.PutUint32(h[:], uint32(len(bw.buf)))
	binary.BigEndian.PutUint32(h[4:], crc32.Checksum(bw.buf, castagnoli))
	err := bw.raw(h[:])
	if err == nil {
		err = bw.raw(bw.buf)
	}
	bw.body += int64(len(bw.buf))
	bw.buf = bw.buf[:0]
	return err
}

// finish writes the last chunk and the end.
func (bw *backupWriter) finish() (*backend.BackupInfo, error) {
	if err := bw.flush(); err != nil {
		return nil, err
	}
	var end [12]byte
	binary.BigEndian.PutUint64(end[4:], uint64(bw.body))
	if err := bw.raw(end[:]); err != nil {
		return nil, err
	}
	sum := bw.sum.Sum(nil)
	if err := bw.raw(sum); err != nil {
		return nil, err
	}
	return &backend.BackupInfo{Store: bw.store, Time: bw.start, Bytes: bw.n, SHA256: hex.EncodeToString(sum)}, nil
}

// backupReader reads a backup file: readBackupHeader checks the header,
// Read returns the stream's bytes, each chunk only once its checksum
// passed, and io.EOF only once the end's length and SHA-256 match. Any
// damage is an error wrapping ErrCorrupt, kept in err.
type backupReader struct {
	r     *bufio.Reader
	sum   hash.Hash
	n     int64
	chunk []byte // checked bytes not yet read, in buf
	buf   []byte
	body  int64
	done  bool  // the end was read and matched
	err   error // the damage found, if any
	info  backend.BackupInfo
}

func readBackupHeader(r io.Reader) (*backupReader, error) {
	br := &backupReader{r: bufio.NewReaderSize(r, 64<<10), sum: sha256.New()}
	head := make([]byte, 14)
	if err := br.full(head); err != nil {
		return nil, err
	}
	if string(head[:8]) != backupMagic {
		return nil, corruptBackup("not an idem backup (its first bytes are %q)", head[:8])
	}
	if v := binary.BigEndian.Uint16(head[8:]); v != backupFormat {
		return nil, corruptBackup("format %d, this idem reads format %d", v, backupFormat)
	}
	n := binary.BigEndian.Uint32(head[10:])
	if n > maxHeader {
		return nil, corruptBackup("a header of %d bytes", n)
	}
	rest := make([]byte, n+4)
	if err := br.full(rest); err != nil {
		return nil, err
	}
	js := rest[:n]
	all := append(head, js...)
	if crc32.Checksum(all, castagnoli) != binary.BigEndian.Uint32(rest[n:]) {
		return nil, corruptBackup("the header fails its checksum")
	}
	var h backupHeader
	if err := json.Unmarshal(js, &h); err != nil {
		return nil, corruptBackup("the header: %v", err)
	}
	if h.Stream != badgerStream {
		return nil, corruptBackup("it holds %q, this idem restores %q", h.Stream, badgerStream)
	}
	br.info = backend.BackupInfo{Store: h.Store, Time: h.Time}
	return br, nil
}

// full reads len(p) bytes into p and the checksum; a short file is damage.
func (br *backupReader) full(p []byte) error {
	n, err := io.ReadFull(br.r, p)
	br.sum.Write(p[:n])
	br.n += int64(n)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		err = corruptBackup("cut short after %d bytes", br.n)
	}
	return br.fail(err)
}

func (br *backupReader) fail(err error) error {
	if err != nil && br.err == nil && errors.Is(err, backend.ErrCorrupt) {
		br.err = err
	}
	return err
}

// Read implements io.Reader over the checked stream.
func (br *backupReader) Read(p []byte) (int, error) {
	for len(br.chunk) == 0 {
		if br.done {
			return 0, io.EOF
		}
		if br.err != nil {
			return 0, br.err
		}
		if err := br.next(); err != nil {
			return 0, err
		}
	}
	n := copy(p, br.chunk)
	br.chunk = br.chunk[n:]
	return n, nil
}

// next reads the next chunk, or the end.
func (br *backupReader) next() error {
	var h [8]byte
	if err := br.full(h[:4]); err != nil {
		return err
	}
	n := binary.BigEndian.Uint32(h[:])
	if n == 0 {
		return br.end()
	}
	if n > backupChunk {
		return br.fail(corruptBackup("a chunk of %d bytes at offset %d", n, br.n-4))
	}
	if err := br.full(h[4:]); err != nil {
		return err
	}
	if cap(br.buf) < int(n) {
		br.buf = make([]byte, backupChunk)
	}
	buf := br.buf[:n]
	if err := br.full(buf); err != nil {
		return err
	}
	if crc32.Checksum(buf, castagnoli) != binary.BigEndian.Uint32(h[4:]) {
		return br.fail(corruptBackup("the chunk at offset %d fails its checksum", br.n-int64(n)-8))
	}
	br.chunk, br.body = buf, br.body+int64(n)
	return nil
}

// end checks the end: the stream's length, the SHA-256, and nothing after.
func (br *backupReader) end() error {
	var n [8]byte
	if err := br.full(n[:]); err != nil {
		return err
	}
	if got := int64(binary.BigEndian.Uint64(n[:])); got != br.body {
		return br.fail(corruptBackup("the end says %d stream bytes, the chunks hold %d", got, br.body))
	}
	want := br.sum.Sum(nil)
	sum := make([]byte, len(want))
	if err := br.full(sum); err != nil {
		return err
	}
	if !bytes.Equal(sum, want) {
		return br.fail(corruptBackup("the SHA-256 at its end does not match its bytes"))
	}
	if _, err := br.r.ReadByte(); !errors.Is(err, io.EOF) {
		return br.fail(corruptBackup("bytes after its end"))
	}
	br.done = true
	br.info.Bytes, br.info.SHA256 = br.n, hex.EncodeToString(want)
	return nil
}
