package badgerstore_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/badgerstore"
)

// Results of every size up to the value threshold (16 KiB, kept in the
// tables), many larger than a block, written with each compression,
// flushed to tables at Close, compacted at the next open, replay byte for
// byte after a reopen.
func TestBadger_Compression_ResultsOfEverySize(t *testing.T) {
	sizes := []int{0, 90, 9000, 12, 15000, 3000, 8200, 700, 16000, 40}
	body := func(i int) string {
		var b bytes.Buffer
		for b.Len() < sizes[i%len(sizes)] {
			fmt.Fprintf(&b, "%d.%d;", i, b.Len())
		}
		return b.String()[:sizes[i%len(sizes)]]
	}
	for _, c := range []badgerstore.Compression{badgerstore.CompressionS2, badgerstore.CompressionZstd, badgerstore.CompressionNone} {
		t.Run(c.String(), func(t *testing.T) {
			const n = 600
			dir := t.TempDir()
			o := badgerstore.Options{Compression: c, MemTableSize: 1 << 20}
			s := openStoreWith(t, dir, &idem.Options{}, o)
			for i := range n {
				_, _, err := s.Do(bg, idem.Request{Key: fmt.Sprint(i)}, ok(body(i)))
				require.NoError(t, err)
			}
			require.NoError(t, s.Close())
			for range 2 {
				s = openStoreWith(t, dir, &idem.Options{}, o)
				for i := range n {
					rec, err := s.Get(bg, "", fmt.Sprint(i))
					require.NoError(t, err)
					require.Equal(t, body(i), string(rec.Result.Body), "key %d", i)
				}
				report, err := s.Verify(bg)
				require.NoError(t, err)
				require.Empty(t, report.Damage)
				require.NoError(t, s.Close())
			}
		})
	}
}
