package fuzz

import (
	"bytes"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// FuzzUnmarshalRecord feeds arbitrary bytes to the record decoder: corrupt
// input must give an error wrapping ErrCorrupt, never a panic, and whatever
// decodes must encode and decode again to the same record.
func FuzzUnmarshalRecord(f *testing.F) {
	if golden, err := os.ReadFile("../testdata/record-v1.msgpack"); err == nil {
		f.Add(golden)
		for i := 1; i < len(golden); i += 7 {
			f.Add(golden[:i])
		}
	}
	at := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	for _, r := range []*idem.Record{
		{Key: "k", State: idem.StateInProgress, Token: 1, LeaseEnds: at},
		{Scope: "s", Key: "k", State: idem.StateReleased, Token: 2, ExpiresAt: at, Recovered: "why"},
		{Key: "k", State: idem.StateDone, Token: 3, Result: &idem.Result{Status: 500, Error: "boom", Truncated: true}},
	} {
		b, err := idem.MarshalRecord(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0xc1})
	f.Add([]byte{0x80})
	f.Add([]byte{0xdf, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		rec, err := idem.UnmarshalRecord(data)
		if err != nil {
			if !errors.Is(err, idem.ErrCorrupt) {
				t.Fatalf("decode error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		if rec.State == idem.StateDone && rec.Result == nil {
			t.Fatal("a done record decoded without a result")
		}
		if idem.ValidateKey(rec.Key) != nil || idem.ValidateScope(rec.Scope) != nil {
			t.Fatal("a record with a malformed key decoded")
		}
		b, err := idem.MarshalRecord(rec)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		again, err := idem.UnmarshalRecord(b)
		if err != nil {
			t.Fatalf("a re-encoded record does not decode: %v", err)
		}
		b2, err := idem.MarshalRecord(again)
		if err != nil || !bytes.Equal(b, b2) {
			t.Fatalf("encoding is not stable: %v", err)
		}
	})
}

// FuzzValidateKey checks key validation against its definition: 1 to 255
// bytes, each printable ASCII. Derived keys always validate.
func FuzzValidateKey(f *testing.F) {
	for _, s := range []string{"", "a", "refund:order-123", "550e8400-e29b-41d4-a716-446655440000",
		"tab\t", "nul\x00", "caf\u00e9", "\x7f", " ", "~", string(make([]byte, 256))} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		want := len(key) >= 1 && len(key) <= idem.MaxKeyLen
		for i := 0; i < len(key); i++ {
			if key[i] < ' ' || key[i] > '~' {
				want = false
			}
		}
		err := idem.ValidateKey(key)
		if (err == nil) != want {
			t.Fatalf("ValidateKey(%q) = %v, want valid=%v", key, err, want)
		}
		if err != nil && !errors.Is(err, idem.ErrInvalidKey) {
			t.Fatalf("error does not wrap ErrInvalidKey: %v", err)
		}
		for _, derived := range []string{idem.StepKey(key, len(key), key), idem.EffectKey(key, key)} {
			if err := idem.ValidateKey(derived); err != nil {
				t.Fatalf("derived key %q is invalid: %v", derived, err)
			}
		}
		if err := idem.ValidateScope(key); err == nil && len(key) > idem.MaxScopeLen {
			t.Fatal("an over-long scope validated")
		}
	})
}
