/*
 * SPDX-FileCopyrightText: © 2017-2025 Istari Digital, Inc.
 * SPDX-License-Identifier: Apache-2.0
 */

package y

import (
	"bytes"
	"encoding/binary"
	"sort"
)

// KeyWord returns b's first eight bytes as a big-endian number, padded
// with zeros. For user keys a and b sharing the prefix before these bytes,
// KeyWord(a) > KeyWord(b) implies a > b, and < implies <: where the padded
// forms first differ, either both have a byte there, or the one with a
// padding zero has ended and is a prefix of the other. Equal words decide
// nothing.
func KeyWord(b []byte) uint64 {
	if len(b) >= 8 {
		return binary.BigEndian.Uint64(b)
	}
	var w [8]byte
	copy(w[:], b)
	return binary.BigEndian.Uint64(w[:])
}

// SearchWords is sort.Search(n, full) over sorted user keys that all start
// with common, where words[i] is KeyWord of the i-th key's bytes after
// common and full(i) compares the i-th key with key (a key with its
// timestamp) in full, true from some element on. Most steps compare
// words, one array in memory, instead of reading a key each; only an
// element whose word equals key's is compared in full.
func SearchWords(n int, common []byte, words []uint64, key []byte, full func(i int) bool) int {
	uk := ParseKey(key)
	if !bytes.HasPrefix(uk, common) {
		// Every key starts with common: all are greater than a key
		// before it, all less than a key after it.
		if bytes.Compare(uk, common) < 0 {
			return 0
		}
		return n
	}
	kw := KeyWord(uk[len(common):])
	return sort.Search(n, func(i int) bool {
		if w := words[i]; w != kw {
			return w > kw
		}
		return full(i)
	})
}
