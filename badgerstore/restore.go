package badgerstore

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/internal/engine"
)

// Restore writes the store a backup file (Store.Backup) holds into dir,
// which must be absent or empty (ErrDirNotEmpty otherwise), and returns
// what the file says of itself. bo are the options the store will be
// opened with (its sizes and Durability).
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
func Restore(ctx context.Context, r io.Reader, dir string, bo Options) (*backend.BackupInfo, error) {
	if bo.InMemory || bo.ReadOnly {
		return nil, errors.New("badgerstore: Restore writes a directory: Options.InMemory and ReadOnly must be false")
	}
	opts, err := badgerOptions(dir, bo)
	if err != nil {
		return nil, err
	}
	if err := restoreErr(engine.CheckEmpty(dir)); err != nil {
		return nil, err
	}
	br, err := readBackupHeader(ctxReader{ctx, r})
	if err != nil {
		return nil, err
	}
	err = engine.Restore(opts, br)
	switch {
	case br.err != nil:
		return nil, br.err
	case err == nil && !br.done:
		return nil, corruptBackup("Badger's stream ended before the file did")
	case err != nil:
		return nil, restoreErr(err)
	}
	b, err := Open(dir, bo)
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
	return backend.Unavailable("restore", fromEngine(err))
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
