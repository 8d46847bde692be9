package idem

import (
	"context"
	"io"

	"github.com/idemkit/idem/backend"
)

// Backup writes a backup of the store to w while it goes on serving, and
// describes it. The backup is one consistent cut of the store, taken once
// every write acknowledged before Backup was called is in it (what idem's
// log holds and Badger has not yet applied included), so every result
// acknowledged before the call replays from the restored store, and every
// claim in progress in it comes back orphaned, for recovery (the
// Resolver) to settle: never replayed as done, never run again blindly.
// Writes made while the backup runs may or may not be in it, each whole.
//
// The file (format 1, see CHANGELOG) is Badger's own backup stream in
// checksummed chunks behind a header naming the store and the time, ending
// with a SHA-256 of the whole: Restore refuses a foreign, damaged or
// cut-short file with ErrCorrupt. A store whose backend is not a Backuper
// returns ErrNoBackup (pgstore: use pg_dump); a closed store ErrClosed. A
// long backup holds Close until it ends, or until ctx does.
func (s *Store) Backup(ctx context.Context, w io.Writer) (*backend.BackupInfo, error) {
	b, ok := s.b.(backend.Backuper)
	if !ok {
		return nil, ErrNoBackup
	}
	var info *backend.BackupInfo
	err := s.call(func() error {
		var err error
		info, err = b.Backup(ctx, w, s.o.Clock.Now())
		return err
	})
	return info, err
}
