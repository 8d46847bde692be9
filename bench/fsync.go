package main

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"unsafe"

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

// directContender is the same loop written the way idem's log writes its
// frames on Linux: one 4 KiB pwrite through a descriptor opened with
// O_DIRECT|O_DSYNC, which the disk makes durable by itself (a FUA write,
// or a write and a cache flush) with no fdatasync after it. The targets
// are judged against the fdatasync loop, the physical limit; this
// one shows what the disk does with the cheaper synced write.
func directContender() Contender {
	return Contender{
		Name: "odirect", Kind: "limit", Durable: true,
		Config: "pwrite of a 4 KiB aligned block through an O_DIRECT|O_DSYNC descriptor, per cycle, on the same " +
			"preallocated 16 MiB file as fdatasync (idem's log writes its frames this way)",
		Open: func(ctx context.Context, dir string) (Store, error) { return openDirect(dir, 1) },
	}
}

// twoWritesContender is the contract's ceiling for a lone caller (issue
// 15): a durable cycle makes the claim durable before the effect runs and
// the result durable before the caller is answered, so one caller needs
// two synced writes per cycle however the store is built. Each cycle is
// two 4 KiB pwrites through an O_DIRECT|O_DSYNC descriptor, as idem's log
// writes its frames.
func twoWritesContender() Contender {
	return Contender{
		Name: "twowrites", Kind: "limit", Durable: true,
		Config: "two 4 KiB aligned pwrites through an O_DIRECT|O_DSYNC descriptor per cycle (one for the claim, one " +
			"for the result), on the same preallocated 16 MiB file as fdatasync: the contract's ceiling for one caller",
		Open: func(ctx context.Context, dir string) (Store, error) { return openDirect(dir, 2) },
	}
}

// openDirect opens the raw loop writing through an O_DIRECT|O_DSYNC
// descriptor, writes times per cycle.
func openDirect(dir string, writes int) (*fsyncStore, error) {
	s, err := openFsync(dir)
	if err != nil {
		return nil, err
	}
	fd, err := unix.Open(s.f.Name(), unix.O_WRONLY|unix.O_DIRECT|unix.O_DSYNC|unix.O_CLOEXEC, 0)
	if err != nil {
		s.Close()
		return nil, err
	}
	s.direct, s.writes = fd, writes
	return s, nil
}

// fsyncStore is the raw sync loop.
type fsyncStore struct {
	f    *os.File
	next atomic.Int64 // the next block to write, modulo the file's blocks
	// direct, if above zero, is an O_DIRECT|O_DSYNC descriptor of f's
	// file, written instead of f and fdatasync, writes times per cycle.
	direct, writes int
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
	off := (s.next.Add(1) % (syncFile / syncBlock)) * syncBlock
	if s.direct > 0 {
		// O_DIRECT wants the memory block-aligned as well.
		mem := make([]byte, 2*syncBlock)
		skip := (syncBlock - int(uintptr(unsafe.Pointer(&mem[0]))%syncBlock)) % syncBlock
		buf := mem[skip : skip+syncBlock]
		copy(buf, key)
		for w := range s.writes {
			if w > 0 {
				off = (s.next.Add(1) % (syncFile / syncBlock)) * syncBlock
			}
			if _, err := unix.Pwrite(s.direct, buf, off); err != nil {
				return err
			}
		}
		return nil
	}
	var buf [syncBlock]byte
	copy(buf[:], key)
	if _, err := s.f.WriteAt(buf[:], off); err != nil {
		return err
	}
	return unix.Fdatasync(int(s.f.Fd()))
}

// Close implements Store.
func (s *fsyncStore) Close() error {
	if s.direct > 0 {
		unix.Close(s.direct)
	}
	return s.f.Close()
}
