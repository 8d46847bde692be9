//go:build upstream

/*
 * SPDX-FileCopyrightText: © 2017-2025 Istari Digital, Inc.
 * SPDX-License-Identifier: Apache-2.0
 */

package table

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/internal/badger/fb"
	"github.com/idemkit/idem/internal/badger/options"
	"github.com/idemkit/idem/internal/ristretto/z"
)

// A damaged block fails VerifyChecksum with an error naming the table,
// never a panic, wherever the damage is: in its entries (the checksum
// does not match: VerifyChecksum named the block's offset through the nil
// block), or in the checksum length or the entry count at its end, which
// block reads before it checks the checksum (slices out of bounds).
func TestVerifyChecksumDamagedBlock(t *testing.T) {
	opts := Options{BlockSize: 4 << 10, BloomFalsePositive: 0.01, ChkMode: options.OnBlockRead}
	tbl := buildTestTable(t, "key", 2000, opts)
	raw, err := os.ReadFile(tbl.Filename())
	require.NoError(t, err)
	var ko fb.BlockOffset
	require.True(t, tbl.offsets(&ko, 0))
	require.Greater(t, tbl.offsetsLength(), 1)
	start, end := int(ko.Offset()), int(ko.Offset()+ko.Len()) // ko reads the mapped index
	require.NoError(t, tbl.DecrRef())

	chkLen := int(binary.BigEndian.Uint32(raw[end-4 : end]))
	count := end - 4 - chkLen - 4 // where the entry count starts
	for _, c := range []struct {
		what string
		off  int
		xor  byte
	}{
		{"an entry", start + 10, 0x01},
		{"the checksum length, high byte", end - 4, 0x80},
		{"the checksum length, low byte", end - 1, 0x04},
		{"the entry count, high byte", count, 0x80},
		{"the entry count, second byte", count + 1, 0x40},
	} {
		t.Run(c.what, func(t *testing.T) {
			damaged := append([]byte(nil), raw...)
			damaged[c.off] ^= c.xor
			path := filepath.Join(t.TempDir(), "000001.sst")
			require.NoError(t, os.WriteFile(path, damaged, 0o600))
			mf, err := z.OpenMmapFile(path, os.O_RDWR, 0)
			require.NoError(t, err)
			tbl, err := OpenTable(mf, opts)
			require.NoError(t, err, "block 0 is not read to open the table")
			defer func() { require.NoError(t, tbl.DecrRef()) }()
			err = tbl.VerifyChecksum()
			require.Error(t, err)
			require.Contains(t, err.Error(), path, "the error names the table")
			require.Contains(t, err.Error(), fmt.Sprintf("block: 0, offset:%d", start))
		})
	}
}
