//go:build upstream && linux

/*
 * SPDX-FileCopyrightText: © Hypermode Inc. <hello@hypermode.com>
 * SPDX-License-Identifier: Apache-2.0
 */

package z

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// unix.Mmap records each mapping in golang.org/x/sys/unix's mmapper until
// unix.Munmap removes it, and Munmap here cannot use unix.Munmap (mremap
// moves mappings). So Mmap must not record the mapping: unix.Munmap, which
// unmaps only what it recorded, has to refuse a slice Mmap returned.
func TestMmapIsNotRecordedByUnixMmap(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "mmap"))
	require.NoError(t, err)
	defer f.Close()
	const size = 1 << 16
	require.NoError(t, f.Truncate(size))

	b, err := Mmap(f, true, size)
	require.NoError(t, err)
	require.Len(t, b, size)
	if err := unix.Munmap(b); err == nil {
		t.Fatal("unix.Munmap unmapped a slice from Mmap: the mapping was recorded " +
			"in x/sys/unix's mmapper, where Munmap never removes it")
	}
	b[0], b[size-1] = 1, 2 // still mapped, and writable

	// Grown (and perhaps moved) by mremap, then unmapped by Munmap.
	b, err = mremap(b, 2*size)
	require.NoError(t, err)
	require.Equal(t, byte(1), b[0])
	require.NoError(t, Munmap(b))
}

func TestMmapRejectsEmptySize(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "mmap"))
	require.NoError(t, err)
	defer f.Close()
	_, err = Mmap(f, true, 0)
	require.ErrorIs(t, err, unix.EINVAL)
}
