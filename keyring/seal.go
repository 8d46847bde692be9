package keyring

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/idemkit/idem/backend"
)

// The envelope a sealed result's Body holds:
//
//	magic (6 bytes) | version (1) | key id length (1) | key id | nonce (12) | ciphertext and tag
//
// The plaintext is the encoding of body, error and headers (encodePlain).
// The associated data is the envelope's bytes up to the nonce, then the
// scope, key and fingerprint (each a uvarint length and the bytes), the
// status (8 bytes, big-endian) and the truncation (1 byte).
const (
	magic = "\x89idemE"
	// Version is the envelope's version, which this release writes; it
	// refuses a newer one with ErrCorrupt.
	Version = 1
	// nonceSize is the standard GCM nonce size: random nonces are safe
	// for far more results than a store keeps under one key (2^32).
	nonceSize = 12
)

// Sealed reports whether res is sealed, and under which key. A result is
// sealed when its Body starts with the envelope's magic and its Header and
// Error are empty.
func Sealed(res *backend.Result) (keyID string, ok bool) {
	if res == nil || res.Header != nil || res.Error != "" || !bytes.HasPrefix(res.Body, []byte(magic)) {
		return "", false
	}
	b := res.Body[len(magic):]
	if len(b) < 2 || int(b[1]) > len(b)-2 {
		return "", true // sealed, but too short to name its key: opens as corrupt
	}
	return string(b[2 : 2+int(b[1])]), true
}

// Seal returns res sealed under the active key for (scope, key,
// fingerprint). A nil ring returns res as it is. A result already sealed
// is sealed again only if its key is not the active one (then it is
// opened first), so Seal of a sealed result is idempotent.
func (r *Ring) Seal(res backend.Result, scope, key, fingerprint string) (backend.Result, error) {
	if r == nil {
		return res, nil
	}
	if id, ok := Sealed(&res); ok {
		if id == r.active {
			return res, nil
		}
		open, err := r.Open(&res, scope, key, fingerprint)
		if err != nil {
			return res, err
		}
		res = *open
	}
	head := make([]byte, 0, len(magic)+2+len(r.active)+nonceSize)
	head = append(head, magic...)
	head = append(head, Version, byte(len(r.active)))
	head = append(head, r.active...)
	aead := r.aeads[r.active]
	plain := encodePlain(&res)
	out := make([]byte, len(head)+nonceSize, len(head)+nonceSize+len(plain)+aead.Overhead())
	copy(out, head)
	if _, err := rand.Read(out[len(head):]); err != nil {
		return res, fmt.Errorf("keyring: nonce: %w", err)
	}
	out = aead.Seal(out, out[len(head):], plain, aad(head, scope, key, fingerprint, &res))
	return backend.Result{Status: res.Status, Body: out, Truncated: res.Truncated}, nil
}

// Open returns the result res seals for (scope, key, fingerprint), or res
// itself when it is not sealed. A key the ring (nil or not) does not hold
// gives a *MissingKeyError; a ciphertext that does not open under its key
// (changed bytes, or copied from another record) an error wrapping
// backend.ErrCorrupt. An opened result shares no memory with res.
func (r *Ring) Open(res *backend.Result, scope, key, fingerprint string) (*backend.Result, error) {
	id, ok := Sealed(res)
	if !ok {
		return res, nil
	}
	corrupt := func(why string) error {
		return fmt.Errorf("%w: sealed result of key %q in scope %q: %s", backend.ErrCorrupt, key, scope, why)
	}
	b := res.Body
	head := len(magic) + 2 + len(id)
	switch {
	case len(b) < len(magic)+2 || len(b) < head:
		return nil, corrupt("envelope too short")
	case b[len(magic)] != Version:
		return nil, corrupt(fmt.Sprintf("envelope version %d, this release reads %d", b[len(magic)], Version))
	case !r.Has(id):
		return nil, &MissingKeyError{Scope: scope, Key: key, KeyID: id}
	}
	aead := r.aeads[id]
	if len(b) < head+nonceSize+aead.Overhead() {
		return nil, corrupt("envelope too short")
	}
	plain, err := aead.Open(nil, b[head:head+nonceSize], b[head+nonceSize:], aad(b[:head], scope, key, fingerprint, res))
	if err != nil {
		return nil, corrupt(fmt.Sprintf("does not open under key %q", id))
	}
	out, err := decodePlain(plain)
	if err != nil {
		return nil, corrupt(err.Error())
	}
	out.Status, out.Truncated = res.Status, res.Truncated
	return out, nil
}

func aad(head []byte, scope, key, fingerprint string, res *backend.Result) []byte {
	a := make([]byte, 0, len(head)+len(scope)+len(key)+len(fingerprint)+3*binary.MaxVarintLen16+9)
	a = append(a, head...)
	for _, s := range []string{scope, key, fingerprint} {
		a = binary.AppendUvarint(a, uint64(len(s)))
		a = append(a, s...)
	}
	a = binary.BigEndian.AppendUint64(a, uint64(int64(res.Status)))
	if res.Truncated {
		return append(a, 1)
	}
	return append(a, 0)
}

// encodePlain encodes what a result keeps of the caller's data:
//
//	flags (1: bit 0 = Header not nil) | body | error | headers
//
// where body and error are a uvarint length and the bytes, and headers a
// uvarint count of names, each a length and the bytes, then a uvarint
// count of values plus one (0 for a nil value) and each value. Names are
// sorted, so a result always encodes alike.
func encodePlain(res *backend.Result) []byte {
	var flags byte
	if res.Header != nil {
		flags = 1
	}
	b := make([]byte, 0, 1+len(res.Body)+len(res.Error)+2*binary.MaxVarintLen64+headerSize(res.Header))
	b = append(b, flags)
	b = appendBytes(b, res.Body)
	b = appendBytes(b, []byte(res.Error))
	if res.Header == nil {
		return b
	}
	names := make([]string, 0, len(res.Header))
	for name := range res.Header {
		names = append(names, name)
	}
	slices.Sort(names)
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, name := range names {
		b = appendBytes(b, []byte(name))
		v := res.Header[name]
		if v == nil {
			b = append(b, 0)
			continue
		}
		b = binary.AppendUvarint(b, uint64(len(v))+1)
		for _, s := range v {
			b = appendBytes(b, []byte(s))
		}
	}
	return b
}

func headerSize(h map[string][]string) int {
	n := binary.MaxVarintLen64
	for name, v := range h {
		n += len(name) + 2*binary.MaxVarintLen64
		for _, s := range v {
			n += len(s) + binary.MaxVarintLen64
		}
	}
	return n
}

func appendBytes(b, s []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// decodePlain decodes encodePlain's bytes. The plaintext was
// authenticated, so an error here means a bug or a newer writer, not an
// attack; it is still an error, never a panic.
func decodePlain(b []byte) (*backend.Result, error) {
	d := decoder{b: b}
	flags := d.byte()
	res := &backend.Result{}
	if body := d.bytes(); len(body) > 0 {
		res.Body = body
	}
	res.Error = string(d.bytes())
	if flags&1 != 0 {
		n := d.uvarint()
		if n > uint64(len(d.b)) {
			return nil, fmt.Errorf("header count %d too large", n)
		}
		res.Header = make(map[string][]string, n)
		for i := uint64(0); i < n && d.err == nil; i++ {
			name := string(d.bytes())
			m := d.uvarint()
			if m > uint64(len(d.b))+1 {
				return nil, fmt.Errorf("value count %d too large", m)
			}
			if m == 0 {
				res.Header[name] = nil
				continue
			}
			v := make([]string, m-1)
			for j := range v {
				v[j] = string(d.bytes())
			}
			res.Header[name] = v
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%d bytes after the result", len(d.b))
	}
	if d.err != nil {
		return nil, d.err
	}
	return res, nil
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) byte() byte {
	if d.err != nil || len(d.b) == 0 {
		d.fail()
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil || n > uint64(len(d.b)) {
		d.fail()
		return nil
	}
	s := d.b[:n:n]
	d.b = d.b[n:]
	return s
}

func (d *decoder) fail() {
	if d.err == nil {
		d.err = fmt.Errorf("plaintext ends early")
	}
}
