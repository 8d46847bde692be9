package idem

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/idemkit/idem/internal/engine"
)

// ErrNoBackup is returned by Store.Backup when the backend cannot back
// itself up (it does not implement Backuper). A PostgreSQL store
// (pgstore) is backed up with PostgreSQL's own tools (pg_dump, or base
// backups with WAL archiving), which see its tables as they commit.
var ErrNoBackup = errors.New("idem: the backend does not back itself up")

// ErrDirNotEmpty is returned by Restore when the directory to restore
// into holds files: a restore never mixes a backup with another store.
var ErrDirNotEmpty = errors.New("idem: directory not empty")

// Backuper is a Backend that can write a consistent snapshot of what it
// stores while it serves: the embedded Badger backend does.
type Backuper interface {
	// Backup writes a backup file to w: a consistent snapshot holding
	// every result and claim acknowledged before it was called. at is the
	// store's time, recorded in the file.
	Backup(ctx context.Context, w io.Writer, at time.Time) (*BackupInfo, error)
}

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
func (s *Store) Backup(ctx context.Context, w io.Writer) (*BackupInfo, error) {
	b, ok := s.b.(Backuper)
	if !ok {
		return nil, ErrNoBackup
	}
	var info *BackupInfo
	err := s.call(func() error {
		var err error
		info, err = b.Backup(ctx, w, s.o.Clock.Now())
		return err
	})
	return info, err
}

// Restore writes the store a backup file (Store.Backup) holds into dir,
// which must be absent or empty (ErrDirNotEmpty otherwise), and returns
// what the file says of itself. opts are the options the store will be
// opened with (its Badger sizes and Durability; nil for the defaults).
//
// Every chunk of the file is checked before it is loaded, and the file's
// end before Restore succeeds: a foreign, damaged or cut-short file is
// ErrCorrupt, and dir is left empty. Open refuses dir while it is being
// loaded (a restore cut short by a crash leaves a marker behind).
// Once loaded, the store is opened once and closed, so that it opens
// normally from then on: it gets an identity of its own and a new
// high-water mark (it is a new store, never taken for the one backed up
// that lost data), and the claims that were in progress at the backup
// are orphaned (their owner is gone): the next Open's recovery hands them
// to the Resolver.
//
// Records keep their expiry times: results whose retention ended since
// the backup was taken are expired in the restored store, and their keys
// run again, as they would have in the store backed up.
func Restore(ctx context.Context, r io.Reader, dir string, opts *Options) (*BackupInfo, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	bo := o.Badger
	if bo.InMemory || bo.ReadOnly {
		return nil, &OptionsError{Field: "Badger", Reason: "a restore writes a directory: not InMemory or ReadOnly"}
	}
	if bo.Durability != Durable && bo.Durability != o.Durability {
		return nil, errDurability
	}
	bo.Durability = o.Durability
	if bo.MemoryBudget == 0 {
		bo.MemoryBudget = o.MemoryBudget
	}
	if bo.Logger == nil {
		bo.Logger = o.Logger
	}
	if err := restoreErr(engine.CheckEmpty(dir)); err != nil {
		return nil, err
	}
	br, err := readBackupHeader(ctxReader{ctx, r})
	if err != nil {
		return nil, err
	}
	err = engine.Restore(badgerOptions(dir, bo), br)
	switch {
	case br.err != nil:
		return nil, br.err
	case err == nil && !br.done:
		return nil, corruptBackup("Badger's stream ended before the file did")
	case err != nil:
		return nil, restoreErr(err)
	}
	b, err := OpenBadger(dir, bo)
	if err != nil {
		return nil, err
	}
	if err := b.Close(); err != nil {
		return nil, err
	}
	info := br.info
	return &info, nil
}

// restoreErr gives Restore's errors this package's sentinels.
func restoreErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, engine.ErrNotEmpty):
		return fmt.Errorf("%w: %w", ErrDirNotEmpty, err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	}
	return unavailable("restore", fromEngine(err))
}

// ctxReader fails its reads once ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
