//go:build !linux

package idem

import "os"

// fdatasync flushes f; where the system offers no fdatasync, a full sync.
func fdatasync(f *os.File) error { return f.Sync() }
