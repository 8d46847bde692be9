package keyring_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/keyring"
	"github.com/stretchr/testify/require"
)

func secret(b byte) []byte { return bytes.Repeat([]byte{b}, keyring.KeySize) }

func ring(t testing.TB, active string, older ...string) *keyring.Ring {
	t.Helper()
	keys := []keyring.Key{{ID: active, Secret: secret(active[0])}}
	for _, id := range older {
		keys = append(keys, keyring.Key{ID: id, Secret: secret(id[0])})
	}
	r, err := keyring.New(keys[0], keys[1:]...)
	require.NoError(t, err)
	return r
}

func full() backend.Result {
	return backend.Result{Status: 201, Body: []byte(`{"card":"4111-MARKER"}`), Error: "declined MARKER",
		Header: map[string][]string{"X-Token": {"MARKER", "2"}, "Nil": nil, "Empty": {}}, Truncated: true}
}

func TestRing_SealOpen_RoundTrip(t *testing.T) {
	r := ring(t, "k1")
	for name, res := range map[string]backend.Result{"full": full(), "empty": {}, "body": {Body: []byte("b")},
		"emptyHeader": {Header: map[string][]string{}}} {
		t.Run(name, func(t *testing.T) {
			sealed, err := r.Seal(res, "s", "k", "fp")
			require.NoError(t, err)
			require.NotContains(t, string(sealed.Body), "MARKER")
			require.Nil(t, sealed.Header)
			require.Empty(t, sealed.Error)
			require.Equal(t, res.Status, sealed.Status)
			id, ok := keyring.Sealed(&sealed)
			require.True(t, ok)
			require.Equal(t, "k1", id)
			got, err := r.Open(&sealed, "s", "k", "fp")
			require.NoError(t, err)
			require.Equal(t, res, *got)
		})
	}
}

func TestRing_Open_Plain(t *testing.T) {
	res := full()
	got, err := ring(t, "k1").Open(&res, "s", "k", "fp")
	require.NoError(t, err)
	require.Equal(t, res, *got)
	var none *keyring.Ring
	got, err = none.Open(&res, "s", "k", "fp")
	require.NoError(t, err)
	require.Equal(t, res, *got)
}

func TestRing_Open_BoundToScopeKeyFingerprint(t *testing.T) {
	r := ring(t, "k1")
	sealed, err := r.Seal(full(), "s", "k", "fp")
	require.NoError(t, err)
	for _, c := range [][3]string{{"s2", "k", "fp"}, {"s", "k2", "fp"}, {"s", "k", "fp2"}} {
		_, err := r.Open(&sealed, c[0], c[1], c[2])
		require.ErrorIs(t, err, backend.ErrCorrupt, "%v", c)
	}
	changed := sealed
	changed.Status = 200
	_, err = r.Open(&changed, "s", "k", "fp")
	require.ErrorIs(t, err, backend.ErrCorrupt)
}

func TestRing_Open_Tampered(t *testing.T) {
	r := ring(t, "k1")
	sealed, err := r.Seal(full(), "s", "k", "fp")
	require.NoError(t, err)
	// The version, and every byte after the key id: nonce, ciphertext, tag.
	for i := 6; i < len(sealed.Body); i++ {
		if i == 7 || i == 8 || i == 9 {
			continue // the key id's length and bytes name another key: missing
		}
		bad := sealed
		bad.Body = bytes.Clone(sealed.Body)
		bad.Body[i] ^= 0x01
		_, err := r.Open(&bad, "s", "k", "fp")
		require.ErrorIs(t, err, backend.ErrCorrupt, "byte %d", i)
	}
	bad := sealed
	bad.Body = sealed.Body[:20]
	_, err = r.Open(&bad, "s", "k", "fp")
	require.ErrorIs(t, err, backend.ErrCorrupt)
}

func TestRing_Open_MissingAndWrongKey(t *testing.T) {
	sealed, err := ring(t, "k1").Seal(full(), "s", "k", "fp")
	require.NoError(t, err)
	_, err = ring(t, "k2").Open(&sealed, "s", "k", "fp")
	var mk *keyring.MissingKeyError
	require.ErrorAs(t, err, &mk)
	require.ErrorIs(t, err, keyring.ErrMissingKey)
	require.Equal(t, "k1", mk.KeyID)
	var none *keyring.Ring
	_, err = none.Open(&sealed, "s", "k", "fp")
	require.ErrorIs(t, err, keyring.ErrMissingKey)
	// Same id, other secret: a wrong key is corrupt, never a wrong result.
	wrong, err := keyring.New(keyring.Key{ID: "k1", Secret: secret(9)})
	require.NoError(t, err)
	_, err = wrong.Open(&sealed, "s", "k", "fp")
	require.ErrorIs(t, err, backend.ErrCorrupt)
}

func TestRing_Rotation(t *testing.T) {
	old := ring(t, "a")
	sealed, err := old.Seal(full(), "s", "k", "fp")
	require.NoError(t, err)
	rotated := ring(t, "b", "a")
	got, err := rotated.Open(&sealed, "s", "k", "fp")
	require.NoError(t, err)
	require.Equal(t, full(), *got)
	again, err := rotated.Seal(sealed, "s", "k", "fp")
	require.NoError(t, err)
	id, _ := keyring.Sealed(&again)
	require.Equal(t, "b", id)
	same, err := rotated.Seal(again, "s", "k", "fp")
	require.NoError(t, err)
	require.Equal(t, again, same, "sealing under the active key again changes nothing")
	_, err = ring(t, "b").Open(&sealed, "s", "k", "fp")
	require.ErrorIs(t, err, keyring.ErrMissingKey)
}

func TestNew_Refuses(t *testing.T) {
	for name, keys := range map[string][]keyring.Key{
		"short":  {{ID: "a", Secret: secret(1)[:16]}},
		"noID":   {{Secret: secret(1)}},
		"space":  {{ID: "a b", Secret: secret(1)}},
		"twice":  {{ID: "a", Secret: secret(1)}, {ID: "a", Secret: secret(2)}},
		"longID": {{ID: string(bytes.Repeat([]byte("x"), keyring.MaxIDLen+1)), Secret: secret(1)}},
	} {
		_, err := keyring.New(keys[0], keys[1:]...)
		require.Error(t, err, name)
	}
}

func TestFetch(t *testing.T) {
	r, err := keyring.Fetch(context.Background(), []string{"new", "old"}, func(_ context.Context, id string) ([]byte, error) {
		return secret(id[0]), nil
	})
	require.NoError(t, err)
	require.Equal(t, "new", r.Active())
	require.Equal(t, []string{"new", "old"}, r.IDs())
	_, err = keyring.Fetch(context.Background(), []string{"x"}, func(context.Context, string) ([]byte, error) {
		return nil, errors.New("kms down")
	})
	require.ErrorContains(t, err, "kms down")
}

// ExampleFetch reads the active key from a file, as an operator's secret
// store or a KMS that unwraps a data key would supply it.
func ExampleFetch() {
	dir, _ := os.MkdirTemp("", "keys")
	defer os.RemoveAll(dir)
	_ = os.WriteFile(filepath.Join(dir, "2026-12"), bytes.Repeat([]byte{7}, keyring.KeySize), 0o600)

	r, err := keyring.Fetch(context.Background(), []string{"2026-12"}, func(_ context.Context, id string) ([]byte, error) {
		return os.ReadFile(filepath.Join(dir, id))
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("active key:", r.Active())
	// Output: active key: 2026-12
}

// BenchmarkRing measures sealing and opening a result of the size the
// bench/ suite saves (a 90-byte body and one header).
func BenchmarkRing(b *testing.B) {
	r := ring(b, "bench")
	const fp = "idemfp2-sha256:546e759a35dad4c7d310fb03280bbc89af10c154c5f7559c8760fbec3e3f3255"
	res := backend.Result{Status: 200, Header: map[string][]string{"Content-Type": {"application/json"}},
		Body: []byte(`{"refund":"re_3PqNXk2eZvKYlo2C","status":"succeeded","amount":4200,"currency":"eur"}`)}
	sealed, err := r.Seal(res, "tenant-a", "refund:order-1004", fp)
	require.NoError(b, err)
	b.Run("Seal", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			_, _ = r.Seal(res, "tenant-a", "refund:order-1004", fp)
		}
	})
	b.Run("Open", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			_, _ = r.Open(&sealed, "tenant-a", "refund:order-1004", fp)
		}
	})
}
