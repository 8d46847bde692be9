//go:build upstream

/*
 * SPDX-FileCopyrightText: © 2017-2025 Istari Digital, Inc.
 * SPDX-License-Identifier: Apache-2.0
 */

package table

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/internal/badger/fb"
	"github.com/idemkit/idem/internal/badger/options"
)

// A block's checksum is verified on its first read, not on every read
// after it (a point read of an uncompressed table with no block cache
// spent a large share of its time there); VerifyChecksum still verifies
// every block. The test damages block 0 in the mapped file after its first
// read: a second read serves it as a block cache would, VerifyChecksum
// finds the damage.
func TestBlockVerifiedOnce(t *testing.T) {
	opts := Options{BlockSize: 4 << 10, BloomFalsePositive: 0.01, ChkMode: options.OnBlockRead}
	tbl := buildTestTable(t, "key", 2000, opts)
	defer func() { require.NoError(t, tbl.DecrRef()) }()
	require.False(t, tbl.blockVerified(0))
	b, err := tbl.block(0, false)
	require.NoError(t, err)
	b.decrRef()
	require.True(t, tbl.blockVerified(0))
	require.False(t, tbl.blockVerified(1))

	var ko fb.BlockOffset
	require.True(t, tbl.offsets(&ko, 0))
	tbl.Data[ko.Offset()+10] ^= 0x01
	b, err = tbl.block(0, false)
	require.NoError(t, err, "a verified block is not verified again")
	b.decrRef()
	require.Error(t, tbl.VerifyChecksum(), "VerifyChecksum verifies every block")
	tbl.Data[ko.Offset()+10] ^= 0x01
	require.NoError(t, tbl.VerifyChecksum())
}
