package idem

import (
	"fmt"
	"os"
	"path/filepath"
)

// Modes of a store's directory and files: its records hold saved responses
// (API tokens, personal data), readable by their owner only.
const (
	privateDirMode  = 0o700
	privateFileMode = 0o600
)

// makePrivate makes dir (created if missing) 0700, whatever the umask or
// the mode it was created with; it touches nothing inside dir, which is
// not locked yet (privateFiles does, once it is). Badger has no option for
// the mode of the files it creates (its tables, value logs and memtables
// are created 0666 less the umask); a 0700 directory keeps other users
// from them whatever their mode, and the files found here are made 0600 at
// every Open.
func makePrivate(dir string) error {
	if err := os.MkdirAll(dir, privateDirMode); err != nil {
		return err
	}
	if err := os.Chmod(dir, privateDirMode); err != nil {
		return fmt.Errorf("make the store directory private (0700): %w", err)
	}
	return nil
}

// privateFiles makes every regular file in dir 0600.
func privateFiles(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, en := range entries {
		if !en.Type().IsRegular() {
			continue
		}
		info, err := en.Info()
		if err != nil {
			if os.IsNotExist(err) {
				continue // removed meanwhile (a compaction)
			}
			return err
		}
		if info.Mode().Perm() != privateFileMode {
			if err := os.Chmod(filepath.Join(dir, en.Name()), privateFileMode); err != nil && !os.IsNotExist(err) {
				return fmt.Errorf("make %s private (0600): %w", en.Name(), err)
			}
		}
	}
	return nil
}
