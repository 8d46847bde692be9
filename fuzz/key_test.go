package fuzz

import (
	"errors"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
)

// FuzzValidateKey checks key validation against its definition: 1 to 255
// bytes, each printable ASCII. Derived keys always validate.
func FuzzValidateKey(f *testing.F) {
	for _, s := range []string{"", "a", "refund:order-123", "550e8400-e29b-41d4-a716-446655440000",
		"tab\t", "nul\x00", "caf\u00e9", "\x7f", " ", "~", string(make([]byte, 256))} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		want := len(key) >= 1 && len(key) <= backend.MaxKeyLen
		for i := 0; i < len(key); i++ {
			if key[i] < ' ' || key[i] > '~' {
				want = false
			}
		}
		err := backend.ValidateKey(key)
		if (err == nil) != want {
			t.Fatalf("ValidateKey(%q) = %v, want valid=%v", key, err, want)
		}
		if err != nil && !errors.Is(err, idem.ErrInvalidKey) {
			t.Fatalf("error does not wrap ErrInvalidKey: %v", err)
		}
		for _, derived := range []string{idem.KeyDeriver{}.Step(key, len(key), key), idem.KeyDeriver{}.Effect(key, key)} {
			if err := backend.ValidateKey(derived); err != nil {
				t.Fatalf("derived key %q is invalid: %v", derived, err)
			}
		}
		if err := backend.ValidateScope(key); err == nil && len(key) > backend.MaxScopeLen {
			t.Fatal("an over-long scope validated")
		}
	})
}
