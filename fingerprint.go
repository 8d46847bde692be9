package idem

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"sync"

	"github.com/idemkit/idem/internal/canon"
)

// The fingerprint's algorithms, and the bounds of the zero Fingerprinter.
const (
	// FingerprintAlgorithm names the current digest; every fingerprint starts
	// with it and a colon. A new canonical encoding gets a new name, so stored
	// fingerprints never silently compare against a different scheme.
	//
	// idemfp2 adds the media-type parameters that change the meaning of the
	// bytes (a multipart boundary, a charset other than UTF-8) to idemfp1; for
	// every other request its encoding, and so its hex digest, is idemfp1's.
	// A record fingerprinted with idemfp1 still matches the same request: the
	// Store compares the hex digests when only the names differ, and
	// Request.PreviousFingerprint (Fingerprinter.SumPrevious) covers the
	// requests whose digest changed.
	FingerprintAlgorithm = "idemfp2-sha256"

	// PreviousFingerprintAlgorithm names the digest of the previous release,
	// which stored records may carry.
	PreviousFingerprintAlgorithm = "idemfp1-sha256"

	// DefaultMaxBodyBytes is the largest body fingerprinted by default (1 MiB).
	DefaultMaxBodyBytes = 1 << 20

	// DefaultMaxDepth is the deepest JSON nesting fingerprinted by default.
	DefaultMaxDepth = 64
)

// Fingerprinter computes fingerprints with explicit bounds; the zero value
// uses the defaults. A Fingerprinter is a plain value and safe for
// concurrent use.
type Fingerprinter struct {
	// MaxBytes is the largest body fingerprinted. Zero or negative means
	// DefaultMaxBodyBytes (1 MiB).
	MaxBytes int

	// MaxDepth is the deepest JSON nesting accepted: MaxDepth nested arrays
	// or objects pass, one more fails. Zero or negative means
	// DefaultMaxDepth (64). Each object moves its members into order when
	// it closes, so a body that nests unordered objects deeply costs up to
	// MaxDepth times a flat one; keep the bound modest.
	MaxDepth int
}

// Sum returns FingerprintAlgorithm, a colon and the lowercase hex SHA-256 of
// a canonical encoding of (method, route, content type, body).
//
// The method and route are used exactly as given. The content type is parsed
// with mime.ParseMediaType and its parameters dropped, except those that
// change what the bytes mean: a multipart type's boundary (as given), and
// the charset (case-insensitive) of a non-JSON type unless it is UTF-8. A
// header that does not parse is used as opaque bytes. The JSON types (application/json, text/json
// and any type/subtype+json) form one class whose bodies are compared by
// meaning: member order, insignificant whitespace and string escape forms do
// not matter, numbers compare by exact decimal value (never through float64),
// and array order and value types do. Bodies of every other type are compared
// byte for byte. An empty body is "no body" for every type, JSON included,
// and differs from a JSON null.
//
// Sum returns an error wrapping ErrBodyTooLarge when body is longer than
// MaxBytes, ErrBodyTooDeep when JSON nests deeper than MaxDepth,
// ErrDuplicateMember when a JSON object names a member twice (compared after
// unescaping), and ErrInvalidJSON when a JSON body is malformed: trailing
// data, a byte order mark, invalid UTF-8, raw control characters in strings,
// or a number outside the JSON grammar. Numbers whose exponent has more than
// 18 digits (after leading zeros) are rejected with ErrInvalidJSON unless
// they are zero.
func (f Fingerprinter) Sum(method, route, contentType string, body []byte) (string, error) {
	return f.sum(method, route, contentType, body, false)
}

// SumPrevious returns the PreviousFingerprintAlgorithm (idemfp1) digest of
// the request, in which every media-type parameter is dropped, when it
// differs from Sum's other than by name; otherwise "". Put it in
// Request.PreviousFingerprint so that a record stored by an earlier
// release with that digest still matches the request rather than being
// refused as a mismatch.
func (f Fingerprinter) SumPrevious(method, route, contentType string, body []byte) (string, error) {
	if !canon.ParamsMatter(contentType) {
		return "", nil
	}
	return f.sum(method, route, contentType, body, true)
}

func (f Fingerprinter) sum(method, route, contentType string, body []byte, v1 bool) (string, error) {
	maxBytes := f.MaxBytes
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBodyBytes
	}
	if len(body) > maxBytes {
		return "", fmt.Errorf("%w: %d bytes, bound is %d", ErrBodyTooLarge, len(body), maxBytes)
	}
	maxDepth := f.MaxDepth
	if maxDepth <= 0 {
		maxDepth = DefaultMaxDepth
	}

	st := statePool.Get().(*fpState)
	// The canonical encoding (internal/canon; design notes in
	// docs/fingerprint.md) is head followed by tail, a body hashed byte
	// for byte rather than copied. The calls are direct and the state is
	// put back without a defer: a method value and a deferred call cost
	// 1-3% of a Sum on the bodies of BenchmarkFingerprint
	// (bench/results/notes/fingerprint-one-pass.md). The encoder does not
	// panic on any input (FuzzFingerprint); if it did, the state would
	// only be lost to the pool.
	alg := FingerprintAlgorithm
	var head, tail []byte
	var err error
	if v1 {
		alg = PreviousFingerprintAlgorithm
		head, tail, err = st.enc.RequestV1(method, route, contentType, body, maxDepth)
	} else {
		head, tail, err = st.enc.Request(method, route, contentType, body, maxDepth)
	}
	if err != nil {
		st.release()
		return "", jsonError(err)
	}
	var sum [sha256.Size]byte
	if tail == nil {
		// One-shot: cheaper than the streaming hasher for small inputs.
		sum = sha256.Sum256(head)
	} else {
		st.h.Reset()
		st.h.Write(head)
		st.h.Write(tail)
		sum = [sha256.Size]byte(st.h.Sum(st.sum[:0]))
	}
	st.release()
	// Both names have the same length, so out stays an array.
	var out [len(FingerprintAlgorithm) + 1 + 2*sha256.Size]byte
	copy(out[:], alg)
	out[len(alg)] = ':'
	encodeHex(out[len(alg)+1:], &sum)
	return string(out[:]), nil
}

// sameRequest reports whether a stored fingerprint names req's payload:
// the same digest; an idemfp1 digest equal to the idemfp2 one but for the
// name (the encodings agree unless a parameter matters); or req's
// PreviousFingerprint.
func sameRequest(stored string, req Request) bool {
	if stored == req.Fingerprint {
		return true
	}
	const cur, prev = FingerprintAlgorithm + ":", PreviousFingerprintAlgorithm + ":"
	if len(stored) > len(prev) && stored[:len(prev)] == prev {
		if req.PreviousFingerprint != "" && stored == req.PreviousFingerprint {
			return true
		}
		return len(req.Fingerprint) > len(cur) && req.Fingerprint[:len(cur)] == cur &&
			stored[len(prev):] == req.Fingerprint[len(cur):]
	}
	return false
}

// jsonError returns the error of Sum for an error of canon: the sentinel
// of its kind and its detail.
func jsonError(err error) error {
	var ce *canon.Error
	if !errors.As(err, &ce) {
		return err
	}
	sentinel := ErrInvalidJSON
	switch ce.Kind {
	case canon.Duplicate:
		sentinel = ErrDuplicateMember
	case canon.TooDeep:
		sentinel = ErrBodyTooDeep
	}
	return fmt.Errorf("%w: %s", sentinel, ce.Detail)
}

// fpState is the reusable scratch space of one Sum call. States are pooled
// so a warm Sum allocates only its result string.
type fpState struct {
	enc canon.Encoder
	h   hash.Hash         // for bodies hashed byte for byte
	sum [sha256.Size]byte // h's output; a local would escape through the interface
}

// statePool holds fpStates between calls; it is the only package-level
// state and carries no data from one call to the next.
var statePool = sync.Pool{New: func() any { return &fpState{h: sha256.New()} }}

func (st *fpState) release() {
	st.enc.Trim()
	statePool.Put(st)
}

// encodeHex writes sum to dst in lowercase hex, four bytes at a time: it
// spreads the eight nibbles of each group into the bytes of a word and turns
// them into digits with word arithmetic (no byte can carry into the next).
// It is several times faster than encoding/hex on a digest.
func encodeHex(dst []byte, sum *[sha256.Size]byte) {
	const (
		ones   = 0x0101010101010101
		nibble = 0x0F0F0F0F0F0F0F0F
	)
	_ = dst[2*sha256.Size-1]
	for k := 0; k < sha256.Size; k += 4 {
		x := uint64(binary.BigEndian.Uint32(sum[k:]))
		x = (x | x<<16) & 0x0000FFFF0000FFFF
		x = (x | x<<8) & 0x00FF00FF00FF00FF
		x = (x | x<<4) & nibble
		letters := (x + 6*ones) >> 4 & ones // 1 in each byte holding 10-15
		binary.BigEndian.PutUint64(dst[2*k:], x+'0'*ones+letters*('a'-'0'-10))
	}
}
