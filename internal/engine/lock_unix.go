//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// lockDir takes idem's own lock on dir, before anything in it is read or
// changed: exclusive for a writer, shared for a read-only open. A writer
// creates dir if absent. The lock is the open file; closing it releases
// the lock. A read-only open of a directory that has no lock file and
// cannot have one (a read-only file system) relies on Badger's lock.
func lockDir(dir string, readOnly bool) (*os.File, error) {
	path := filepath.Join(dir, LockName)
	how := unix.LOCK_EX | unix.LOCK_NB
	var f *os.File
	var err error
	if readOnly {
		how = unix.LOCK_SH | unix.LOCK_NB
		f, err = os.Open(path)
		if errors.Is(err, fs.ErrNotExist) {
			f, err = os.OpenFile(path, os.O_RDONLY|os.O_CREATE, 0o600)
			if err != nil {
				return nil, nil
			}
		}
	} else {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		f, err = os.OpenFile(path, os.O_RDONLY|os.O_CREATE, 0o600)
	}
	if err != nil {
		return nil, err
	}
	for {
		err = unix.Flock(int(f.Fd()), how)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", ErrLocked, dir)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, nil
}
