//go:build !linux

/*
 * SPDX-FileCopyrightText: © Hypermode Inc. <hello@hypermode.com>
 * SPDX-License-Identifier: Apache-2.0
 */

package z

import "os"

// allocate extends the file with zeros: there is no portable fallocate.
func allocate(fd *os.File, off, n int64) error {
	return extendWithZeros(fd, off, n)
}
