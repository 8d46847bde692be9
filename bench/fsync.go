package main

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Sizes of the raw sync loop: it overwrites 4 KiB blocks of a file
// written and synced in full beforehand, so each fdatasync flushes data
// only, never a file-size or allocation change: the cheapest durable
// write the disk offers.
const (
	syncBlock = 4 << 10
	syncFile  = 16 << 20
)

// fsyncContender is the physical limit: a 4 KiB write followed by
// fdatasync, per cycle. At one goroutine that is one synced commit at a
// time; at 32, concurrent writers each sync their own block of one file,
// and the kernel and disk may merge their flushes.
func fsyncContender() Contender {
	return Contender{
		Name: "fdatasync", Kind: "limit", Durable: true,
		Config: "the physical limit: pwrite of 4 KiB then unix.Fdatasync, per cycle, on a preallocated 16 MiB file " +
			"(blocks overwritten in a ring, so no metadata changes); at 32 goroutines each writes its own block",
		Open: func(ctx context.Context, dir string) (Store, error) { return openFsync(dir) },
	}
}

// fsyncStore is the raw sync loop.
type fsyncStore struct {
	f    *os.File
	next atomic.Int64 // the next block to write, modulo the file's blocks
}

func openFsync(dir string) (*fsyncStore, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, "sync.dat"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	block := make([]byte, 1<<20)
	for i := range block {
		block[i] = byte(i)
	}
	for off := int64(0); off < syncFile; off += int64(len(block)) {
		if _, err := f.WriteAt(block, off); err != nil {
			f.Close()
			return nil, err
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, err
	}
	return &fsyncStore{f: f}, nil
}

// Cycle implements Cycler: one block written and synced.
func (s *fsyncStore) Cycle(ctx context.Context, key string) error {
	var buf [syncBlock]byte
	copy(buf[:], key)
	off := (s.next.Add(1) % (syncFile / syncBlock)) * syncBlock
	if _, err := s.f.WriteAt(buf[:], off); err != nil {
		return err
	}
	return unix.Fdatasync(int(s.f.Fd()))
}

// Close implements Store.
func (s *fsyncStore) Close() error { return s.f.Close() }
