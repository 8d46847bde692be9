package wal

import (
	"errors"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// SyncData flushes f's data, and its metadata only where reading the data
// back needs it (a new size or new blocks), not its times.
func SyncData(f *os.File) error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if err != unix.EINTR {
			return err
		}
	}
}

// directFile is a file opened with O_DIRECT|O_DSYNC: a write returns once
// its blocks are durable, without going through the page cache.
type directFile struct{ fd int }

// openDirectFile opens path for direct, synchronous writes; ok is false
// where the file system refuses O_DIRECT (tmpfs, some network and FUSE
// file systems).
func openDirectFile(path string) (*directFile, bool) {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_DIRECT|unix.O_DSYNC|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, false
	}
	return &directFile{fd: fd}, true
}

// writeAt writes p, a block-aligned buffer of whole blocks, at the
// block-aligned offset off. It returns errDirectRefused if the system
// rejects the direct write as such (alignment stricter than a block).
func (d *directFile) writeAt(p []byte, off int64) error {
	for len(p) > 0 {
		n, err := unix.Pwrite(d.fd, p, off)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EINVAL:
			return errDirectRefused
		case err != nil:
			return err
		case n == 0:
			return errors.New("direct write: no progress")
		}
		p, off = p[n:], off+int64(n)
	}
	return nil
}

// close closes the file; closing it again does nothing.
func (d *directFile) close() {
	if d.fd >= 0 {
		unix.Close(d.fd)
		d.fd = -1
	}
}

// alignedBlocks returns a zeroed buffer of n bytes whose start is aligned
// to BlockSize, as O_DIRECT requires of memory.
func alignedBlocks(n int) []byte {
	b := make([]byte, n+BlockSize)
	skip := (BlockSize - int(uintptr(unsafe.Pointer(&b[0]))%BlockSize)) % BlockSize
	return b[skip : skip+n : skip+n]
}
