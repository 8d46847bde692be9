package backend

import (
	"context"
	"io"
	"time"
)

// Backuper is a Backend that can write a consistent snapshot of what it
// stores while it serves: the embedded Badger backend does.
type Backuper interface {
	// Backup writes a backup file to w: a consistent snapshot holding
	// every result and claim acknowledged before it was called. at is the
	// store's time, recorded in the file.
	Backup(ctx context.Context, w io.Writer, at time.Time) (*BackupInfo, error)
}

// BackupInfo describes a backup file.
type BackupInfo struct {
	// Store is the identity of the store backed up (hex), "" for a store
	// in memory. A restored store gets an identity of its own.
	Store string `json:"store"`
	// Time is when the backup began, by the store's clock.
	Time time.Time `json:"time"`
	// Bytes is the size of the file.
	Bytes int64 `json:"bytes"`
	// SHA256 is the checksum the file ends with (hex), over every byte
	// before it.
	SHA256 string `json:"sha256"`
}
