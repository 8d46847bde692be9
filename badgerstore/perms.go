package badgerstore

import (
	"errors"
	"fmt"
	"io/fs"
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
// not locked yet (privateFiles does, once it is). Every file the engine
// creates is created 0600 and every directory 0700 (Badger's and
// ristretto's copies are patched for it: upstream creates 0666 less the
// umask); privateFiles fixes what an older version, or someone else,
// left looser.
func makePrivate(dir string) error {
	if err := os.MkdirAll(dir, privateDirMode); err != nil {
		return err
	}
	if err := os.Chmod(dir, privateDirMode); err != nil {
		return fmt.Errorf("make the store directory private (0700): %w", err)
	}
	return nil
}

// privateFiles makes every regular file under dir 0600 and every
// directory under it (the quarantine) 0700.
func privateFiles(dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // removed meanwhile (a compaction)
		}
		if err != nil {
			return err
		}
		want := fs.FileMode(privateFileMode)
		switch {
		case d.IsDir():
			want = privateDirMode
		case !d.Type().IsRegular():
			return nil
		}
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if info.Mode().Perm() == want {
			return nil
		}
		if err := os.Chmod(path, want); err != nil && !errors.Is(err, fs.ErrNotExist) {
			rel, _ := filepath.Rel(dir, path)
			return fmt.Errorf("make %s private (%04o): %w", rel, want, err)
		}
		return nil
	})
}
