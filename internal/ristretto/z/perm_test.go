//go:build upstream && unix

/*
 * SPDX-FileCopyrightText: © Hypermode Inc. <hello@hypermode.com>
 * SPDX-License-Identifier: Apache-2.0
 */

package z

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// The files z creates hold a database's data: only their owner may read
// them, whatever the umask lets through.
func TestCreatedFilesAreOwnerOnly(t *testing.T) {
	old := syscall.Umask(0o022) // the usual umask, which lets 0666 become 0644
	defer syscall.Umask(old)
	dir := t.TempDir()

	mf, err := OpenMmapFile(filepath.Join(dir, "mmap"), os.O_RDWR|os.O_CREATE, 1<<12)
	if err != nil && err != NewFile {
		t.Fatal(err)
	}
	require.NoError(t, mf.Close(-1))
	requireOwnerOnly(t, filepath.Join(dir, "mmap"))

	buf, err := NewBufferPersistent(filepath.Join(dir, "buffer"), 1<<12)
	require.NoError(t, err)
	require.NoError(t, buf.Release())
	requireOwnerOnly(t, filepath.Join(dir, "buffer"))
}

func requireOwnerOnly(t *testing.T, path string) {
	t.Helper()
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Zero(t, fi.Mode().Perm()&0o077, "%s is %v: readable or writable by others than its owner", path, fi.Mode().Perm())
}
