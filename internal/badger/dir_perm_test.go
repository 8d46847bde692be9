//go:build upstream && unix && !aix

/*
 * SPDX-FileCopyrightText: © 2017-2025 Istari Digital, Inc.
 * SPDX-License-Identifier: Apache-2.0
 */

package badger

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// The directory lock's pid file is readable and writable by its owner only,
// as Badger's other files of its own (MANIFEST, KEYREGISTRY) are, whatever
// the umask lets through.
func TestLockFileIsOwnerOnly(t *testing.T) {
	old := syscall.Umask(0o022) // the usual umask, which lets 0666 become 0644
	defer syscall.Umask(old)
	dir := t.TempDir()
	db, err := Open(getTestOptions(dir))
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()

	for _, name := range []string{lockFile, ManifestFilename} {
		fi, err := os.Stat(filepath.Join(dir, name))
		require.NoError(t, err)
		require.Zero(t, fi.Mode().Perm()&0o077, "%s is %v: readable or writable by others than its owner", name, fi.Mode().Perm())
	}
}
