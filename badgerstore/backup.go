package badgerstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/idemkit/idem/backend"
)

var _ backend.Backuper = (*Backend)(nil)

// Backup implements Backuper: Badger's backup stream of one read
// transaction, begun once Badger holds every write idem's log made
// durable (docs/engine.md, "Backup and restore").
func (b *Backend) Backup(ctx context.Context, w io.Writer, at time.Time) (*backend.BackupInfo, error) {
	bw, err := newBackupWriter(w, backupHeader{Store: b.eng.StoreID(), Time: at, Stream: badgerStream})
	if err == nil {
		_, err = b.eng.Backup(ctx, bw)
	}
	var info *backend.BackupInfo
	if err == nil {
		info, err = bw.finish()
	}
	switch {
	case err == nil:
		return info, nil
	case bw != nil && bw.werr != nil:
		return nil, fmt.Errorf("idem: backup: writing the file: %w", bw.werr)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return nil, err
	}
	return nil, backend.Unavailable("backup", fromEngine(err))
}
