package keyring

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"errors"
	"fmt"
	"slices"
)

// KeySize is the size of a key's secret in bytes (AES-256).
const KeySize = 32

// MaxIDLen bounds a key id's length.
const MaxIDLen = 64

// Key is one key of a Ring.
type Key struct {
	// ID names the key in every result it seals: 1 to MaxIDLen printable
	// ASCII characters, no space. It is stored in clear.
	ID string
	// Secret is the key itself, KeySize random bytes.
	Secret []byte
}

// Ring holds the keys results are sealed and opened with; one of them is
// active. A Ring is immutable and safe for concurrent use.
type Ring struct {
	active string
	ids    []string               // every id, the active first
	aeads  map[string]cipher.AEAD // by id
}

// New returns a ring whose active key is active, holding the older keys
// too, for results they sealed. Ids must be valid and distinct, secrets
// KeySize bytes. New copies nothing it keeps but the cipher state: the
// caller may clear the secrets after it returns.
func New(active Key, older ...Key) (*Ring, error) {
	r := &Ring{active: active.ID, aeads: map[string]cipher.AEAD{}}
	for _, k := range append([]Key{active}, older...) {
		if err := validID(k.ID); err != nil {
			return nil, err
		}
		if _, dup := r.aeads[k.ID]; dup {
			return nil, fmt.Errorf("keyring: key id %q given twice", k.ID)
		}
		if len(k.Secret) != KeySize {
			return nil, fmt.Errorf("keyring: key %q has %d bytes, want %d", k.ID, len(k.Secret), KeySize)
		}
		block, err := aes.NewCipher(k.Secret)
		if err != nil {
			return nil, fmt.Errorf("keyring: key %q: %w", k.ID, err)
		}
		gcm, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("keyring: key %q: %w", k.ID, err)
		}
		r.aeads[k.ID] = gcm
		r.ids = append(r.ids, k.ID)
	}
	return r, nil
}

// Fetch returns a ring of the keys ids names, the first active, asking
// get for each secret: get may read a file, or ask a KMS to unwrap a data
// key. The first error of get is returned, wrapped.
func Fetch(ctx context.Context, ids []string, get func(ctx context.Context, id string) ([]byte, error)) (*Ring, error) {
	if len(ids) == 0 {
		return nil, errors.New("keyring: no key ids")
	}
	keys := make([]Key, len(ids))
	for i, id := range ids {
		secret, err := get(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("keyring: fetch key %q: %w", id, err)
		}
		keys[i] = Key{ID: id, Secret: secret}
	}
	return New(keys[0], keys[1:]...)
}

// Active returns the id of the key new results are sealed with.
func (r *Ring) Active() string { return r.active }

// IDs returns the ids of every key the ring holds, the active first.
func (r *Ring) IDs() []string { return slices.Clone(r.ids) }

// Has reports whether the ring holds the key named id.
func (r *Ring) Has(id string) bool {
	if r == nil {
		return false
	}
	_, ok := r.aeads[id]
	return ok
}

func validID(id string) error {
	if id == "" || len(id) > MaxIDLen {
		return fmt.Errorf("keyring: key id %q: want 1 to %d characters", id, MaxIDLen)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("keyring: key id %q: want printable ASCII without spaces", id)
		}
	}
	return nil
}
