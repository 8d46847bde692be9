/*
 * SPDX-FileCopyrightText: © Hypermode Inc. <hello@hypermode.com>
 * SPDX-License-Identifier: Apache-2.0
 */

package z

import (
	"os"

	"golang.org/x/sys/unix"
)

// allocate is fallocate with mode 0: the blocks of the range, and the file
// grown to off+n if shorter. File systems without fallocate get the zeros.
func allocate(fd *os.File, off, n int64) error {
	for {
		err := unix.Fallocate(int(fd.Fd()), 0, off, n)
		switch err {
		case nil:
			return nil
		case unix.EINTR:
			continue
		case unix.EOPNOTSUPP, unix.ENOSYS:
			return extendWithZeros(fd, off, n)
		}
		return &os.PathError{Op: "fallocate", Path: fd.Name(), Err: err}
	}
}
