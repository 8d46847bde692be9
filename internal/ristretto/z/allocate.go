/*
 * SPDX-FileCopyrightText: © Hypermode Inc. <hello@hypermode.com>
 * SPDX-License-Identifier: Apache-2.0
 */

package z

import (
	"fmt"
	"os"
)

// Allocate gives the range [off, off+n) of fd disk blocks, growing the file
// to off+n if it is shorter, before any of it is written through a memory
// map. A write through a mapping into a hole that the file system cannot
// fill (a full disk) is not an error but SIGBUS, which kills the process;
// allocating first turns a full disk into an error (ENOSPC) returned here.
// On Linux it is fallocate (mode 0); where that is missing (another system,
// or a file system without it) the file is extended with zeros written
// past its end, and a hole inside the file is left as it is.
func Allocate(fd *os.File, off, n int64) error {
	if n <= 0 {
		return nil
	}
	return allocate(fd, off, n)
}

// Allocate gives the range [off, off+n) of the mapped file disk blocks
// (see the function Allocate); the range must lie inside the mapping.
func (m *MmapFile) Allocate(off, n int) error {
	return Allocate(m.Fd, int64(off), int64(n))
}

// extendWithZeros writes zeros from the end of fd to off+n, so that the
// blocks of the growth are allocated by the writes; ranges inside the file
// are left as they are. On an error the file is cut back to its size.
func extendWithZeros(fd *os.File, off, n int64) error {
	fi, err := fd.Stat()
	if err != nil {
		return err
	}
	size, end := fi.Size(), off+n
	if size >= end {
		return nil
	}
	zero := make([]byte, min(end-size, 1<<20))
	for at := size; at < end; {
		w := min(int64(len(zero)), end-at)
		if _, err := fd.WriteAt(zero[:w], at); err != nil {
			_ = fd.Truncate(size)
			return err
		}
		at += w
	}
	return nil
}

// allocateGrowth allocates the blocks between the end of the mapping and
// maxSz before Truncate maps them; on an error the file keeps its size and
// its mapping, and the error wraps the system's (ENOSPC).
func (m *MmapFile) allocateGrowth(maxSz int64) error {
	cur := int64(len(m.Data))
	if maxSz <= cur {
		return nil
	}
	if err := Allocate(m.Fd, cur, maxSz-cur); err != nil {
		_ = m.Fd.Truncate(cur) // free what was allocated
		return fmt.Errorf("while allocating file: %s to %d bytes: %w", m.Fd.Name(), maxSz, err)
	}
	return nil
}
