package badgerstore

import (
	"fmt"
	"strconv"

	"github.com/idemkit/idem/internal/badger"
	"github.com/idemkit/idem/internal/badger/options"
)

// Compression is how the Badger backend compresses the blocks of the
// tables it writes. A table records its own compression, so a store opens
// and reads whatever mix of tables earlier options (or releases) wrote.
type Compression uint8

const (
	// CompressionS2 compresses blocks with S2 in Snappy's format, the
	// default: tables take about 40% of the bytes of uncompressed ones,
	// and a block decodes in a few microseconds.
	CompressionS2 Compression = iota
	// CompressionZstd compresses blocks with zstd at level 1, for a host
	// that counts disk bytes over CPU: about a quarter fewer bytes than
	// S2, while a read spends about twice the CPU decoding its block.
	CompressionZstd
	// CompressionNone stores blocks as they are, read straight from the
	// mapped file: the most disk, the least CPU per read.
	CompressionNone
)

// String returns "s2", "zstd" or "none".
func (c Compression) String() string {
	switch c {
	case CompressionS2:
		return "s2"
	case CompressionZstd:
		return "zstd"
	case CompressionNone:
		return "none"
	}
	return "Compression(" + strconv.Itoa(int(c)) + ")"
}

// compressedBlockSize is the block size of compressed tables: a read
// decodes a whole block, S2's decoding was the largest single cost of a
// replay read from disk, and 4 KiB replay 9-14% faster than 8 KiB (which
// were about 10% cheaper than 16 KiB) at 1,000,000 keys; 2 KiB were no
// faster within the noise (bench/results/notes/replay-from-disk-profile.md).
const compressedBlockSize = 4 << 10

// apply sets bo's compression, and the block size of compressed tables
// unless bo's was changed from the budget's.
func (c Compression) apply(bo badger.Options) (badger.Options, error) {
	switch c {
	case CompressionS2:
		bo.Compression = options.Snappy
	case CompressionZstd:
		bo.Compression, bo.ZSTDCompressionLevel = options.ZSTD, 1
	case CompressionNone:
		bo.Compression = options.None
	default:
		return bo, fmt.Errorf("badgerstore: unknown Compression %d", c)
	}
	if bo.Compression != options.None && bo.BlockSize == budgetBlockSize {
		bo.BlockSize = compressedBlockSize
	}
	return bo, nil
}
