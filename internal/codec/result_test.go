package codec

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// checkResultCodec checks a result encoded alone: AppendResult writes
// what msgpack.Marshal writes (up to the order of header names and the
// form of integers), and UnmarshalResult reads it, and msgpack's own
// encoding, by the fast path, to what msgpack reads and what res holds.
func checkResultCodec(t *testing.T, res *Result) {
	t.Helper()
	got := AppendResult([]byte("prefix"), res)[len("prefix"):]
	want, err := msgpack.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var ref Result
	if err := msgpack.Unmarshal(got, &ref); err != nil {
		t.Fatalf("msgpack does not read AppendResult's %x: %v", got, err)
	}
	wantRes := *res
	if len(wantRes.Body) == 0 {
		wantRes.Body = nil
	}
	if len(wantRes.Header) == 0 {
		wantRes.Header = nil
	}
	if !reflect.DeepEqual(&ref, &wantRes) {
		t.Fatalf("msgpack reads AppendResult's encoding as\n %+v\nwant %+v", &ref, &wantRes)
	}
	if d := (decoder{in: got, headerAt: -1}); !d.result(new(Result)) {
		t.Fatalf("the fast decoder refused AppendResult's %x", got)
	}
	for _, b := range [][]byte{got, want} {
		checkResultDecode(t, b)
		dec, err := UnmarshalResult(b)
		if err != nil || !reflect.DeepEqual(dec, &wantRes) {
			t.Fatalf("UnmarshalResult(%x) = %+v, %v; want %+v", b, dec, err, &wantRes)
		}
	}
	if !bytes.Equal(AppendResult(nil, &wantRes), got) && len(res.Header) <= 1 {
		t.Fatal("re-encoding a decoded result changes its bytes")
	}
}

// checkResultDecode checks that UnmarshalResult and msgpack read b to the
// same result, or both fail (UnmarshalResult with a *CorruptError), and
// that the result holds none of b.
func checkResultDecode(t *testing.T, b []byte) {
	t.Helper()
	scratch := bytes.Clone(b)
	got, err := UnmarshalResult(scratch)
	var snapshot *Result
	if err == nil {
		snapshot = cloneResult(got)
	}
	for i := range scratch {
		scratch[i] = 0xc1 // the result must hold none of it
	}
	if err == nil && !reflect.DeepEqual(got, snapshot) {
		t.Fatalf("UnmarshalResult(%x) kept bytes of its input", b)
	}
	var ce *CorruptError
	if err != nil && !errors.As(err, &ce) {
		t.Fatalf("decode error is not a *CorruptError: %v", err)
	}
	w := msgpackWalker{b: b}
	if !w.structure(resultLayout()) {
		if err == nil {
			if d := (decoder{in: b, headerAt: -1}); !d.result(new(Result)) {
				t.Fatalf("UnmarshalResult decodes %x with msgpack, which the walk refuses", b)
			}
		}
		return
	}
	var want Result
	werr := msgpack.Unmarshal(b, &want)
	switch {
	case (err == nil) != (werr == nil):
		t.Fatalf("UnmarshalResult(%x) = %v, msgpack %v", b, err, werr)
	case err == nil && !reflect.DeepEqual(got, &want):
		t.Fatalf("UnmarshalResult(%x) differs from msgpack\n got %+v\nwant %+v", b, got, &want)
	}
}

// cloneResult returns a deep copy of res.
func cloneResult(res *Result) *Result {
	c := *res
	c.Body = bytes.Clone(res.Body)
	if res.Header != nil {
		c.Header = make(map[string][]string, len(res.Header))
		for k, vs := range res.Header {
			if vs != nil {
				vs = append([]string{}, vs...)
			}
			c.Header[k] = vs
		}
	}
	return &c
}

// Results cut short or with a byte changed, and forms msgpack writes that
// AppendResult does not: UnmarshalResult answers as msgpack does.
func TestUnmarshalResult_DamagedAndOtherForms(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	n := 300
	if testing.Short() {
		n = 60
	}
	for range n {
		res := genResult(rng)
		b := AppendResult(nil, res)
		// Every prefix of a short encoding, 64 of a long one.
		step := max(1, len(b)/64)
		for i := 0; i < len(b); i += step {
			checkResultDecode(t, b[:i])
		}
		for range 20 {
			c := bytes.Clone(b)
			if len(c) > 0 {
				c[rng.IntN(len(c))] = byte(rng.Uint32())
			}
			checkResultDecode(t, c)
		}
		if t.Failed() {
			t.Fatalf("result %+v", res)
		}
	}
	// The zero result, nil, a result written as an array, a status as a
	// 64-bit integer, an unknown field: all read, by msgpack.
	for _, b := range [][]byte{{0x80}, {0xc0}, {0x95, 0x01, 0xc0, 0xc0, 0xa0, 0xc2},
		{0x81, 0xa1, 's', 0xd3, 0, 0, 0, 0, 0, 0, 0, 200}, {0x81, 0xa1, 'z', 0x01}} {
		if _, err := UnmarshalResult(b); err != nil {
			t.Errorf("UnmarshalResult(%x): %v", b, err)
		}
		checkResultDecode(t, b)
	}
	for _, b := range [][]byte{{}, {0xc1}, {0x01}, {0xdf, 0xff, 0xff, 0xff, 0xff}} {
		if _, err := UnmarshalResult(b); err == nil {
			t.Errorf("UnmarshalResult(%x) decodes", b)
		}
		checkResultDecode(t, b)
	}
}

// FuzzUnmarshalResult feeds arbitrary bytes to UnmarshalResult: it agrees
// with msgpack, never panics, and keeps none of its input.
func FuzzUnmarshalResult(f *testing.F) {
	rng := rand.New(rand.NewPCG(7, 8))
	for range 20 {
		f.Add(AppendResult(nil, genResult(rng)))
	}
	f.Add([]byte{0x80})
	f.Add([]byte{0xc0})
	f.Fuzz(func(t *testing.T, data []byte) {
		checkResultDecode(t, data)
	})
}
