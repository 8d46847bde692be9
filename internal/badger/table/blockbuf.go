/*
 * SPDX-FileCopyrightText: © 2017-2025 Istari Digital, Inc.
 * SPDX-License-Identifier: Apache-2.0
 */

package table

import (
	"sync"

	"github.com/idemkit/idem/internal/ristretto/z"
)

// maxPooledBlockBuf bounds the buffers kept for reuse: a block larger than
// this (an entry larger than a block) gets a buffer of its own.
const maxPooledBlockBuf = 256 << 10

// blockBufs holds the buffers of decoded blocks (decompressed or
// decrypted) whose last reference was dropped, for the next block to be
// decoded into. Without jemalloc, z.Free does nothing and every block a
// compaction or a read decodes was a new buffer for Go's collector: on
// idem's durable writes, a quarter of the bytes allocated. A block's
// reference count already decides when its bytes may be freed (with
// jemalloc they are then released to C), and every holder of a block's
// bytes copies what it keeps (the level handler's ValueCopy, the DB
// iterator's SafeCopy, the builders' Add), so handing the bytes to the next
// block at that moment is as safe as freeing them.
var blockBufs sync.Pool

// blockBuf returns a buffer of n bytes (not zeroed) to decode a block into.
func blockBuf(n int) []byte {
	if !usingJemalloc && n <= maxPooledBlockBuf {
		if p, ok := blockBufs.Get().(*[]byte); ok {
			if cap(*p) >= n {
				return (*p)[:n]
			}
		}
	}
	return z.Calloc(n, "Table.Decompress")
}

// freeBlockBuf gives back a buffer blockBuf or z.Calloc returned, once no
// block refers to it.
func freeBlockBuf(b []byte) {
	if usingJemalloc {
		z.Free(b)
		return
	}
	if c := cap(b); c > 0 && c <= maxPooledBlockBuf {
		b = b[:0]
		blockBufs.Put(&b)
	}
}
