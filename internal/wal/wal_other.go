//go:build !linux

package wal

import "os"

// SyncData flushes f; where the system offers no fdatasync, a full sync.
func SyncData(f *os.File) error { return f.Sync() }

// directFile is not available here: frames go through the page cache.
type directFile struct{}

func openDirectFile(string) (*directFile, bool) { return nil, false }

func (*directFile) writeAt([]byte, int64) error { return errDirectRefused }

func (*directFile) close() {}

func alignedBlocks(n int) []byte { return make([]byte, n) }
