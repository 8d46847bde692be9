package idem_test

import (
	"context"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/badgerstore"
	"github.com/stretchr/testify/require"
)

// TestFingerprint_MeaningfulParams: the media-type parameters that change
// what the bytes mean take part in the fingerprint; the others do not.
func TestFingerprint_MeaningfulParams(t *testing.T) {
	sum := func(ct, body string) string {
		got, err := idem.Fingerprinter{}.Sum("POST", "/upload", ct, []byte(body))
		require.NoError(t, err, ct)
		return got
	}
	form := "--A\r\nContent-Disposition: form-data; name=\"x\"\r\n\r\n1\r\n--A--\r\n--B--"
	require.NotEqual(t, sum("multipart/form-data; boundary=A", form), sum("multipart/form-data; boundary=B", form),
		"the same bytes split at another boundary are another form")
	require.NotEqual(t, sum("multipart/form-data; boundary=A", form), sum("multipart/form-data; boundary=a", form),
		"a boundary is case-sensitive")
	require.Equal(t, sum("multipart/form-data; boundary=A", form), sum(`Multipart/Form-Data; boundary="A"`, form))
	require.NotEqual(t, sum("text/plain; charset=iso-8859-1", "caf\xe9"), sum("text/plain; charset=windows-1252", "caf\xe9"))
	require.NotEqual(t, sum("text/plain; charset=iso-8859-1", "caf\xe9"), sum("text/plain", "caf\xe9"))
	require.Equal(t, sum("text/plain; charset=ISO-8859-1", "x"), sum("text/plain; charset=iso-8859-1", "x"),
		"a charset's name is case-insensitive")
	require.Equal(t, sum("text/plain; charset=utf-8", "x"), sum("text/plain", "x"), "UTF-8 is the default")
	require.Equal(t, sum("text/plain; format=flowed", "x"), sum("text/plain", "x"), "other parameters do not count")
	require.Equal(t, sum("application/json; charset=iso-8859-1", `{"a":1}`), sum("application/json", `{ "a" : 1 }`),
		"JSON keeps ignoring its charset")
	require.Equal(t, sum("application/octet-stream; boundary=A", "x"), sum("application/octet-stream; boundary=B", "x"),
		"a boundary counts for multipart types only")
}

// TestFingerprint_Previous: SumPrevious gives the idemfp1 digest only when
// it differs from Sum's but for the name.
func TestFingerprint_Previous(t *testing.T) {
	var f idem.Fingerprinter
	prev, err := f.SumPrevious("POST", "/r", "application/json", []byte(`{}`))
	require.NoError(t, err)
	require.Empty(t, prev, "no parameter matters: the hex digests agree")
	a, err := f.SumPrevious("POST", "/r", "multipart/form-data; boundary=A", []byte("x"))
	require.NoError(t, err)
	b, err := f.SumPrevious("POST", "/r", "multipart/form-data; boundary=B", []byte("x"))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(a, idem.PreviousFingerprintAlgorithm+":"))
	require.Equal(t, a, b, "idemfp1 dropped every parameter")
}

// TestStore_Idemfp1RecordsStillMatch: a record stored with an idemfp1
// digest (before the upgrade) matches the same request fingerprinted with
// idemfp2, whether or not its digest changed, and still refuses another.
func TestStore_Idemfp1RecordsStillMatch(t *testing.T) {
	ctx := context.Background()
	s := openStoreWith(t, "", &idem.Options{}, badgerstore.Options{InMemory: true})
	var f idem.Fingerprinter
	runs := 0
	fn := func(context.Context) (idem.Result, error) { runs++; return idem.Result{Status: 201}, nil }
	for _, tc := range []struct{ key, ct, body, other string }{
		{"json", "application/json", `{"a":1}`, `{"a":2}`},
		{"form", "multipart/form-data; boundary=A", "--A--", "--A-- "},
	} {
		v1, err := f.SumPrevious("POST", "/r", tc.ct+"; x=1", []byte(tc.body)) // forces the idemfp1 path
		require.NoError(t, err)
		if v1 == "" {
			cur, err := f.Sum("POST", "/r", tc.ct, []byte(tc.body))
			require.NoError(t, err)
			v1 = idem.PreviousFingerprintAlgorithm + strings.TrimPrefix(cur, idem.FingerprintAlgorithm)
		}
		// The record as an earlier release stored it.
		_, _, err = s.Do(ctx, idem.Request{Scope: "t", Key: tc.key, Fingerprint: v1}, fn)
		require.NoError(t, err)
		cur, err := f.Sum("POST", "/r", tc.ct, []byte(tc.body))
		require.NoError(t, err)
		prev, err := f.SumPrevious("POST", "/r", tc.ct, []byte(tc.body))
		require.NoError(t, err)
		_, replayed, err := s.Do(ctx, idem.Request{Scope: "t", Key: tc.key, Fingerprint: cur, PreviousFingerprint: prev}, fn)
		require.NoError(t, err, tc.key)
		require.True(t, replayed, tc.key)
		other, err := f.Sum("POST", "/r", tc.ct, []byte(tc.other))
		require.NoError(t, err)
		_, _, err = s.Do(ctx, idem.Request{Scope: "t", Key: tc.key, Fingerprint: other}, fn)
		require.ErrorIs(t, err, idem.ErrMismatch, tc.key)
	}
	require.Equal(t, 2, runs)
}
