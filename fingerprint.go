package idem

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"math/bits"
	"mime"
	"slices"
	"sync"
	"unicode/utf8"
)

// FingerprintAlgorithm names the current digest; every fingerprint starts
// with it and a colon. A new canonical encoding gets a new name, so stored
// fingerprints never silently compare against a different scheme.
const FingerprintAlgorithm = "idemfp1-sha256"

// Bounds used by the zero Fingerprinter and by Fingerprint.
const (
	// DefaultMaxBodyBytes is the largest body fingerprinted by default (1 MiB).
	DefaultMaxBodyBytes = 1 << 20

	// DefaultMaxDepth is the deepest JSON nesting fingerprinted by default.
	DefaultMaxDepth = 64
)

// Fingerprint digests what a request asks for, using the default bounds of
// the zero Fingerprinter. See Fingerprinter.Sum for the semantics.
func Fingerprint(method, route, contentType string, body []byte) (string, error) {
	return Fingerprinter{}.Sum(method, route, contentType, body)
}

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
// with mime.ParseMediaType and its parameters dropped; a header that does not
// parse is used as opaque bytes. The JSON types (application/json, text/json
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
	defer st.release()

	b := st.buf[:0]
	b = appendField(b, method)
	b = appendField(b, route)
	b, isJSON := appendClass(b, contentType)
	var rawBody []byte // hashed after b, for bodies taken byte for byte
	switch {
	case len(body) == 0:
		b = append(b, tagEmpty)
	case isJSON:
		var err error
		if b, err = st.appendJSON(b, body, maxDepth); err != nil {
			st.buf = b
			return "", err
		}
	default:
		b = append(b, tagBytes)
		b = binary.AppendUvarint(b, uint64(len(body)))
		rawBody = body
	}
	st.buf = b

	var sum [sha256.Size]byte
	if rawBody == nil {
		// One-shot: cheaper than the streaming hasher for small inputs.
		sum = sha256.Sum256(b)
	} else {
		st.h.Reset()
		st.h.Write(b)
		st.h.Write(rawBody)
		sum = [sha256.Size]byte(st.h.Sum(st.sum[:0]))
	}
	var out [len(FingerprintAlgorithm) + 1 + 2*sha256.Size]byte
	copy(out[:], FingerprintAlgorithm)
	out[len(FingerprintAlgorithm)] = ':'
	encodeHex(out[len(FingerprintAlgorithm)+1:], &sum)
	return string(out[:]), nil
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

// The canonical encoding hashed by Sum. Every part is self-delimiting, so the
// concatenation is injective: two different requests (in the sense of Sum's
// doc comment) never produce the same bytes.
//
//	request  = field(method) field(route) class body
//	field(s) = uvarint(len(s)) s
//	class    = 'J'                   JSON, whatever the exact media type
//	         | 'M' field(mediatype)  lower-cased, parameters dropped
//	         | 'R' field(header)     a header that does not parse, as given
//	body     = 'E'                   empty body, for every class
//	         | value                 JSON class
//	         | 'B' uvarint(n) bytes  any other class; the bytes as given
//	value    = 'n' | 't' | 'f'       null, true, false
//	         | string
//	         | '0'                   the number zero (-0 included)
//	         | sign digits varint(e) a non-zero number, ±digits × 10^e, where
//	                                 digits are its significant decimal
//	                                 digits: no leading or trailing zeros
//	         | '[' value* ']'
//	         | '{' (string value)* '}'   members sorted by encoded name
//	sign     = 0xC0|n | 0xE0|n       +, -; n = len(digits) <= 31
//	         | '+' uvarint(n) | '-' uvarint(n)   longer ones
//	string   = 0x80|n text           n = len(text) <= 31
//	         | 's' uvarint(n) text   longer ones
//
// No two kinds of value share a first byte. The one-byte forms (as in
// MessagePack's fixstr) matter: strings are most of a typical body, and
// every byte saved is a byte not hashed.
//
// String text is the decoded string in UTF-8, except that a \u escape of a
// UTF-16 surrogate that is not part of a pair is written as the three-byte
// generalized UTF-8 form of the code unit (as WTF-8 does). Valid UTF-8 never
// holds those bytes, so a lone surrogate collides neither with U+FFFD nor
// with any other string.
const (
	tagJSONClass     = 'J'
	tagMediaType     = 'M'
	tagRawType       = 'R'
	tagEmpty         = 'E'
	tagBytes         = 'B'
	tagNull          = 'n'
	tagTrue          = 't'
	tagFalse         = 'f'
	tagString        = 's'
	tagShortString   = 0x80 // | length, for lengths up to maxShort
	tagZero          = '0'
	tagPositive      = '+'
	tagNegative      = '-'
	tagShortPositive = 0xC0 // | digit count, up to maxShort
	tagShortNegative = 0xE0 // | digit count, up to maxShort
	tagArray         = '['
	tagArrayEnd      = ']'
	tagObject        = '{'
	tagObjectEnd     = '}'

	maxShort = 0x1F // longest string or digit string with a one-byte tag
)

// Scratch buffers larger than these are dropped rather than pooled, so one
// huge body does not pin its memory.
const (
	maxPooledBuf  = 64 << 10
	maxPooledList = 4 << 10
)

// maxExponent bounds the magnitude of a JSON number's exponent. Larger
// exponents are rejected rather than computed with arbitrary precision; the
// bound keeps exponent arithmetic far from int64 overflow.
const maxExponent = 1e18 - 1

// maxSmallObject is the most members an object can have for sortMembers to
// use an insertion sort.
const maxSmallObject = 16

// fpState is the reusable scratch space of one Sum call. States are pooled
// so a warm Sum allocates only its result string.
type fpState struct {
	buf      []byte            // canonical encoding being built
	tmp      []byte            // copy of an object's members while they are reordered
	members  []member          // members of every open object, innermost last
	order    []int             // sorted member order of the object being closed
	stack    []int             // per open container: -1 for an array, else the index in members of the object's first member
	top      int               // the last entry of stack, or noContainer
	maxDepth int               // the bound on len(stack)
	h        hash.Hash         // for bodies hashed byte for byte, not copied to buf
	sum      [sha256.Size]byte // h's output; a local would escape through the interface
}

// member locates one object member in the canonical buffer: its encoded
// name is b[key:val], and its value runs from val to the next member's key
// or, for the last member, to the end of the buffer when the object closes.
// at is the body offset of the name, for error messages. pfx holds the
// first eight bytes of the encoded name, big-endian and zero-padded, so most
// comparisons are one integer compare.
type member struct {
	key, val, at int
	pfx          uint64
}

// compareNames orders members by their encoded names, as bytes.Compare
// would, and returns 0 exactly when the names are equal. The prefix decides
// almost every comparison; it is kept small enough to inline.
func compareNames(b []byte, x, y *member) int {
	if x.pfx != y.pfx {
		if x.pfx < y.pfx {
			return -1
		}
		return 1
	}
	return compareLongNames(b, x, y)
}

// compareLongNames compares names with equal prefixes. Names of at most
// eight encoded bytes are then equal: their first byte encodes their length,
// so the zero padding cannot be confused with text of the same length.
func compareLongNames(b []byte, x, y *member) int {
	if x.val-x.key <= 8 && y.val-y.key <= 8 {
		return 0
	}
	return bytes.Compare(b[x.key:x.val], b[y.key:y.val])
}

// namePrefix returns the pfx of the encoded name enc.
func namePrefix(enc []byte) uint64 {
	var p uint64
	for k, c := range enc[:min(len(enc), 8)] {
		p |= uint64(c) << (56 - 8*k)
	}
	return p
}

// statePool holds fpStates between calls; it is the only package-level
// state and carries no data from one call to the next.
var statePool = sync.Pool{New: func() any { return &fpState{h: sha256.New()} }}

func (st *fpState) release() {
	if cap(st.buf) > maxPooledBuf {
		st.buf = nil
	}
	if cap(st.tmp) > maxPooledBuf {
		st.tmp = nil
	}
	if cap(st.members) > maxPooledList {
		st.members = nil
	}
	if cap(st.stack) > maxPooledList {
		st.stack = nil
	}
	if cap(st.order) > maxPooledList {
		st.order = nil
	}
	statePool.Put(st)
}

func appendField(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// appendClass appends the class of contentType and reports whether bodies
// of that class are JSON.
func appendClass(b []byte, contentType string) ([]byte, bool) {
	if contentType == "application/json" {
		return append(b, tagJSONClass), true
	}
	mt, ok := simpleMediaType(contentType)
	if !ok {
		parsed, _, err := mime.ParseMediaType(contentType)
		if err != nil {
			b = append(b, tagRawType)
			return appendField(b, contentType), false
		}
		mt = parsed
	}
	if isJSONType(mt) {
		return append(b, tagJSONClass), true
	}
	b = append(b, tagMediaType)
	b = binary.AppendUvarint(b, uint64(len(mt)))
	for i := 0; i < len(mt); i++ {
		b = append(b, lowerASCII(mt[i]))
	}
	return b, false
}

// simpleMediaType returns the media type of the common header shapes
// ("type/subtype", optionally with a plain UTF-8 charset) without calling
// mime.ParseMediaType, which allocates a map per call. It returns ok only
// when ParseMediaType would succeed and return the lower-cased result, so
// both paths agree; anything unusual takes the slow path.
func simpleMediaType(ct string) (mt string, ok bool) {
	mt = ct
	if i := indexByte(ct, ';'); i >= 0 {
		switch ct[i:] {
		case "; charset=utf-8", ";charset=utf-8", "; charset=UTF-8", ";charset=UTF-8":
			mt = ct[:i]
		default:
			return "", false
		}
	}
	slash := -1
	for i := 0; i < len(mt); i++ {
		c := mt[i]
		if c == '/' && slash < 0 {
			slash = i
			continue
		}
		if !isTokenChar(c) {
			return "", false
		}
	}
	if slash <= 0 || slash == len(mt)-1 {
		return "", false
	}
	return mt, true
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}

// isTokenChar reports whether c may appear in an RFC 1521 token: printable
// ASCII other than space and the tspecials.
func isTokenChar(c byte) bool {
	if c <= ' ' || c >= 0x7f {
		return false
	}
	switch c {
	case '(', ')', '<', '>', '@', ',', ';', ':', '\\', '"', '/', '[', ']', '?', '=':
		return false
	}
	return true
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + ('a' - 'A')
	}
	return c
}

// equalFoldASCII compares s with the lower-case ASCII string lower.
func equalFoldASCII(s, lower string) bool {
	if len(s) != len(lower) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if lowerASCII(s[i]) != lower[i] {
			return false
		}
	}
	return true
}

// isJSONType reports whether the media type mt (ASCII, any case) is
// application/json, text/json or type/subtype+json with a non-empty subtype
// before the suffix.
func isJSONType(mt string) bool {
	if equalFoldASCII(mt, "application/json") || equalFoldASCII(mt, "text/json") {
		return true
	}
	const suffix = "+json"
	n := len(mt) - len(suffix)
	if n <= 0 || !equalFoldASCII(mt[n:], suffix) {
		return false
	}
	slash := indexByte(mt, '/')
	return slash > 0 && slash < n-1
}

// JSON canonicalization.
//
// No library does this job. RFC 8785 (JCS) implementations compare numbers as
// IEEE doubles, which would merge 12345678901234567890 and
// 12345678901234567891 into one fingerprint, and encoding/json's
// Decoder.Token allocates per token and accepts duplicate members, so two
// servers could disagree about which value a request meant. Hence a
// hand-written single pass over the bytes: it validates, decodes and appends
// the canonical encoding to a reused buffer in one go, with an explicit
// stack instead of recursion so that depth costs heap, not goroutine stack.
// Objects are canonicalized when they close: their members already sit in
// the buffer, and are reordered in place by their encoded names.
//
// Speed matters: a typical 300-byte body should cost well under three times
// a SHA-256 of the same bytes (issue 5), so the common tokens take a path
// that reads and writes whole words. fuzz/fingerprint_ref_test.go keeps the
// plainer implementation this one replaced, and FuzzFingerprint and
// TestFingerprint_Reference check that the two agree byte for byte, errors
// included.

// fastRoom is the free space scan needs at the end of its buffer before
// each token, so that it writes by index without growth checks of its own:
// its largest write is a tag and 32 bytes of string text, or a tag, 32
// bytes of digits and an exponent byte.
const fastRoom = 64

// noContainer is the innermost container of a top-level value: see stack.
const noContainer = -2

// Initial capacities of fpState.stack and fpState.members, which scan
// fills without growing them.
const (
	minStack   = 64
	minMembers = 32
)

// Little-endian words of the JSON literals, for one comparison each.
const (
	wordTrue = 't' | 'r'<<8 | 'u'<<16 | 'e'<<24
	wordNull = 'n' | 'u'<<8 | 'l'<<16 | 'l'<<24
	wordAlse = 'a' | 'l'<<8 | 's'<<16 | 'e'<<24 // false after the f
)

// A scanState says where in the grammar a JSON parse stands: at the start
// of a value, at the start of a member name, after a member name (at its
// colon), or after a value.
type scanState uint8

const (
	atValue scanState = iota
	atName
	atColon
	atAfter
)

// appendJSON appends the canonical value of the JSON text body to b.
//
// The work is split between scan, which takes the common tokens (strings
// that need no decoding, small numbers, literals, brackets and separators)
// as fast as it can, and the loop below, which takes one step in full
// generality wherever scan stops and then hands back. Both produce the
// same bytes and the same errors for any token; scan is only faster. It
// makes one call, to sort an object that closes out of order: calls that
// return into a loop make the compiler save the loop's registers around
// them, which on the common tokens costs more than the token.
func (st *fpState) appendJSON(b, body []byte, maxDepth int) ([]byte, error) {
	// The nesting stack and open members stay in st: only containers and
	// member names touch them. st.top caches the last entry of the stack.
	st.stack, st.members, st.maxDepth = st.stack[:0], st.members[:0], maxDepth
	if cap(st.stack) < minStack {
		st.stack = make([]int, 0, minStack)
	}
	if cap(st.members) < minMembers {
		st.members = make([]member, 0, minMembers)
	}
	if cap(st.order) < maxSmallObject {
		st.order = make([]int, 0, maxSmallObject)
	}
	st.top = noContainer

	// The output is written by index into out, which is always resliced to
	// its capacity; it ends at out[n]. The canonical form of a typical body
	// is shorter than the body, so one size usually serves the whole call.
	n := len(b)
	out := slices.Grow(b, len(body)+fastRoom)
	out = out[:cap(out)]

	i := skipSpace(body, 0)
	at := atValue
	for {
		n, i, at = st.scan(out, n, body, i, at)
		var err error
		switch at {
		case atValue:
			if len(out)-n < fastRoom {
				out = growOut(out, n)
				continue
			}
			if i >= len(body) {
				return out[:n], errEnd(i)
			}
			switch c := body[i]; c {
			case '"':
				var s []byte
				if s, i, err = appendString(out[:n], body, i); err != nil {
					return s, err
				}
				out, n = s[:cap(s)], len(s)
				at = atAfter
			case '[', '{':
				if len(st.stack) >= maxDepth {
					return out[:n], fmt.Errorf("%w: more than %d levels at offset %d", ErrBodyTooDeep, maxDepth, i)
				}
				i = skipSpace(body, i+1)
				if c == '[' {
					out[n] = tagArray
					n++
					if i < len(body) && body[i] == ']' {
						out[n] = tagArrayEnd
						n++
						i++
						at = atAfter
						continue
					}
					st.top = -1
				} else {
					out[n] = tagObject
					n++
					if i < len(body) && body[i] == '}' {
						out[n] = tagObjectEnd
						n++
						i++
						at = atAfter
						continue
					}
					st.top = len(st.members)
					at = atName
				}
				st.stack = append(st.stack, st.top)
			case 't', 'f', 'n':
				word, tag := "null", byte(tagNull)
				if c == 't' {
					word, tag = "true", tagTrue
				} else if c == 'f' {
					word, tag = "false", tagFalse
				}
				if len(body)-i < len(word) || string(body[i:i+len(word)]) != word {
					return out[:n], fmt.Errorf("%w: bad literal at offset %d", ErrInvalidJSON, i)
				}
				out[n] = tag
				n++
				i += len(word)
				at = atAfter
			default:
				var s []byte
				if s, i, err = appendNumber(out[:n], body, i); err != nil {
					return s, err
				}
				out, n = s[:cap(s)], len(s)
				at = atAfter
			}

		case atName:
			if len(out)-n < fastRoom {
				out = growOut(out, n)
				continue
			}
			if i >= len(body) {
				return out[:n], errEnd(i)
			}
			if body[i] != '"' {
				return out[:n], fmt.Errorf("%w: expected a member name at offset %d", ErrInvalidJSON, i)
			}
			open, key := i, n
			var s []byte
			if s, i, err = appendString(out[:n], body, i); err != nil {
				return s, err
			}
			out, n = s[:cap(s)], len(s)
			st.members = addMember(st.members, key, n, open, namePrefix(out[key:n]))
			if i, err = colon(body, i); err != nil {
				return out[:n], err
			}
			at = atValue

		case atColon:
			// scan took a member name and found no colon after it.
			_, err = colon(body, i)
			return out[:n], err

		case atAfter:
			i = skipSpace(body, i)
			if st.top == noContainer {
				if i != len(body) {
					return out[:n], fmt.Errorf("%w: data after the value at offset %d", ErrInvalidJSON, i)
				}
				return out[:n], nil
			}
			if i >= len(body) {
				return out[:n], errEnd(i)
			}
			if len(out)-n < 16 {
				out = growOut(out, n) // permute reads past n; a tag follows
			}
			switch c := body[i]; {
			case c == ',':
				i = skipSpace(body, i+1)
				at = atValue
				if st.top >= 0 {
					at = atName
				}
				continue
			case c == ']' && st.top < 0:
				out[n] = tagArrayEnd
				n++
			case c == '}' && st.top >= 0:
				if err := st.sortMembers(out[:n], st.members[st.top:]); err != nil {
					return out[:n], err
				}
				st.members = st.members[:st.top]
				out[n] = tagObjectEnd
				n++
			default:
				return out[:n], errUnexpected(body, i)
			}
			st.stack = st.stack[:len(st.stack)-1]
			st.top = noContainer
			if len(st.stack) > 0 {
				st.top = st.stack[len(st.stack)-1]
			}
			i++
		}
	}
}

// scan continues the parse of appendJSON from body[i], in state at, writing
// to out from n on, for as long as the tokens are common ones, and returns
// where it stopped: the new n and i, and the state there. It stops before
// any token it does not take, leaving it whole to appendJSON, except that
// it stops after a member name whose colon does not follow (atColon). It
// writes nothing past n+fastRoom before checking for room again.
//
// The code for strings is written out twice, for names and for values, so
// that no flag tells them apart: scan has few registers to spare.
func (st *fpState) scan(out []byte, n int, body []byte, i int, at scanState) (int, int, scanState) {
	body = body[:len(body):len(body)] // so that one register holds both
	out = out[:len(out):len(out)]
	switch at {
	case atName:
		goto name
	case atAfter:
		goto after
	case atColon:
		return n, i, at
	}

value:
	if i >= len(body) || len(out)-n < fastRoom {
		return n, i, atValue
	}
	switch c := body[i]; c {
	case '"':
		// Plain ASCII text of up to 31 bytes, the most a one-byte tag
		// holds: the closing quote is found in registers, 16 bytes at a
		// time, and the text copied in words whatever its length.
		var text *[16]byte
		if i+17 <= len(body) {
			text = (*[16]byte)(body[i+1 : i+17])
		} else {
			text = tail(body, i+1)
		}
		w0 := binary.LittleEndian.Uint64(text[:8])
		w1 := binary.LittleEndian.Uint64(text[8:])
		dst := (*[33]byte)(out[n : n+33])
		binary.LittleEndian.PutUint64(dst[1:9], w0)
		binary.LittleEndian.PutUint64(dst[9:17], w1)
		k := 0
		if m := specialBytes(w0); m != 0 {
			k = bits.TrailingZeros64(m) >> 3
		} else if m := specialBytes(w1); m != 0 {
			k = 8 + bits.TrailingZeros64(m)>>3
		} else {
			if i+33 > len(body) {
				return n, i, atValue
			}
			text = (*[16]byte)(body[i+17 : i+33])
			w2 := binary.LittleEndian.Uint64(text[:8])
			w3 := binary.LittleEndian.Uint64(text[8:])
			binary.LittleEndian.PutUint64(dst[17:25], w2)
			binary.LittleEndian.PutUint64(dst[25:33], w3)
			if m := specialBytes(w2); m != 0 {
				k = 16 + bits.TrailingZeros64(m)>>3
			} else if m := specialBytes(w3); m != 0 {
				k = 24 + bits.TrailingZeros64(m)>>3
			} else {
				return n, i, atValue
			}
		}
		if text[k&15] != '"' {
			return n, i, atValue
		}
		dst[0] = tagShortString | byte(k)
		n += 1 + k
		i += 2 + k
	case '[', '{':
		if len(st.stack) >= st.maxDepth || len(st.stack) == cap(st.stack) {
			return n, i, atValue
		}
		i = skipSpace(body, i+1)
		if c == '[' {
			out[n] = tagArray
			n++
			if i < len(body) && body[i] == ']' {
				out[n] = tagArrayEnd
				n++
				i++
				goto after
			}
			st.top = -1
			st.stack = st.stack[:len(st.stack)+1] // within capacity
			st.stack[len(st.stack)-1] = -1
			goto value
		}
		out[n] = tagObject
		n++
		if i < len(body) && body[i] == '}' {
			out[n] = tagObjectEnd
			n++
			i++
			goto after
		}
		st.top = len(st.members)
		st.stack = st.stack[:len(st.stack)+1] // within capacity
		st.stack[len(st.stack)-1] = st.top
		goto name
	case 't':
		if i+4 > len(body) || binary.LittleEndian.Uint32(body[i:i+4]) != wordTrue {
			return n, i, atValue
		}
		out[n] = tagTrue
		n++
		i += 4
	case 'n':
		if i+4 > len(body) || binary.LittleEndian.Uint32(body[i:i+4]) != wordNull {
			return n, i, atValue
		}
		out[n] = tagNull
		n++
		i += 4
	case 'f':
		if i+5 > len(body) || binary.LittleEndian.Uint32(body[i+1:i+5]) != wordAlse {
			return n, i, atValue
		}
		out[n] = tagFalse
		n++
		i += 5
	default:
		// A number: the common shapes only, an integer or a decimal
		// fraction of at most 16 digits in each part and 31 in all,
		// without an exponent, and whose last digit is not a zero. Those need no arithmetic:
		// the digits are copied, the fraction's over the excess of the
		// integer part's words, and the exponent is minus the fraction's
		// length. Zero is also taken.
		tag := byte(tagShortPositive)
		j := i
		if c == '-' {
			tag = tagShortNegative
			j++
		}
		e := j // the end of the digits so far
		for e < len(body) && '0' <= body[e] && body[e] <= '9' {
			e++
		}
		d := e - j // digits of the integer part
		if d == 0 || d > 16 || body[j] == '0' && d > 1 {
			return n, i, atValue
		}
		next := byte(0)
		if e < len(body) {
			next = body[e]
		}
		if body[j] == '0' {
			if next == '.' || next|0x20 == 'e' {
				return n, i, atValue
			}
			out[n] = tagZero
			n++
			i = e
			goto after
		}
		dst := out[n : n+34]
		if j+16 <= len(body) {
			src := body[j : j+16]
			binary.LittleEndian.PutUint64(dst[1:9], binary.LittleEndian.Uint64(src[:8]))
			binary.LittleEndian.PutUint64(dst[9:17], binary.LittleEndian.Uint64(src[8:]))
		} else {
			for k := range d {
				dst[1+k&31] = body[j+k]
			}
		}
		exp := byte(0) // the zigzag varint of the exponent: one byte
		if next == '.' {
			f := e + 1 // the start of the fraction
			e = f
			for e < len(body) && '0' <= body[e] && body[e] <= '9' {
				e++
			}
			if e == f || e-f > 16 {
				return n, i, atValue
			}
			out := dst[1+d : 34]
			if f+16 <= len(body) {
				src := body[f : f+16]
				binary.LittleEndian.PutUint64(out[0:8], binary.LittleEndian.Uint64(src[:8]))
				binary.LittleEndian.PutUint64(out[8:16], binary.LittleEndian.Uint64(src[8:]))
			} else {
				for k := range e - f {
					out[k&15] = body[f+k]
				}
			}
			exp = byte(2*(e-f) - 1) // -(e-f)
			d += e - f
			next = 0
			if e < len(body) {
				next = body[e]
			}
		}
		if next|0x20 == 'e' || body[e-1] == '0' || d > maxShort {
			return n, i, atValue
		}
		dst[0] = tag | byte(d)
		dst[1+d] = exp
		n += 2 + d
		i = e
	}
	goto after

name:
	// As for a value string above, and the name's member recorded.
	if i >= len(body) || len(out)-n < fastRoom || body[i] != '"' || len(st.members) == cap(st.members) {
		return n, i, atName
	}
	{
		var text *[16]byte
		if i+17 <= len(body) {
			text = (*[16]byte)(body[i+1 : i+17])
		} else {
			text = tail(body, i+1)
		}
		w0 := binary.LittleEndian.Uint64(text[:8])
		w1 := binary.LittleEndian.Uint64(text[8:])
		dst := (*[33]byte)(out[n : n+33])
		binary.LittleEndian.PutUint64(dst[1:9], w0)
		binary.LittleEndian.PutUint64(dst[9:17], w1)
		k := 0
		low := ^uint64(0) // the byte mask of the text in w0
		if m := specialBytes(w0); m != 0 {
			k = bits.TrailingZeros64(m) >> 3
			low = (m&-m)>>7 - 1
		} else if m := specialBytes(w1); m != 0 {
			k = 8 + bits.TrailingZeros64(m)>>3
		} else {
			if i+33 > len(body) {
				return n, i, atName
			}
			text = (*[16]byte)(body[i+17 : i+33])
			w2 := binary.LittleEndian.Uint64(text[:8])
			w3 := binary.LittleEndian.Uint64(text[8:])
			binary.LittleEndian.PutUint64(dst[17:25], w2)
			binary.LittleEndian.PutUint64(dst[25:33], w3)
			if m := specialBytes(w2); m != 0 {
				k = 16 + bits.TrailingZeros64(m)>>3
			} else if m := specialBytes(w3); m != 0 {
				k = 24 + bits.TrailingZeros64(m)>>3
			} else {
				return n, i, atName
			}
		}
		if text[k&15] != '"' {
			return n, i, atName
		}
		tag := tagShortString | byte(k)
		dst[0] = tag
		// The sort prefix (see member), from the words in hand: loading
		// it back from out right after the store would stall on store
		// forwarding.
		ms := st.members[:len(st.members)+1] // within capacity
		ms[len(ms)-1] = member{
			key: n, val: n + 1 + k, at: i,
			pfx: uint64(tag)<<56 | bits.ReverseBytes64(w0&low)>>8,
		}
		st.members = st.members[:len(ms)]
		n += 1 + k
		i += 2 + k
	}
	if i < len(body) && body[i] == ':' {
		i++
	} else {
		i = skipSpace(body, i)
		if i >= len(body) || body[i] != ':' {
			return n, i, atColon
		}
		i++
	}
	i = skipSpace(body, i)
	goto value

after:
	// A value ended just before body[i]: close containers until a
	// separator continues one.
	i = skipSpace(body, i)
	if i >= len(body) {
		return n, i, atAfter
	}
	switch body[i] {
	case ',':
		if st.top < 0 {
			if st.top == noContainer {
				return n, i, atAfter
			}
			i = skipSpace(body, i+1)
			goto value
		}
		i = skipSpace(body, i+1)
		goto name
	case ']':
		if st.top != -1 || n == len(out) {
			return n, i, atAfter
		}
		out[n] = tagArrayEnd
		n++
		i++
		st.stack = st.stack[:len(st.stack)-1]
		st.top = noContainer
		if len(st.stack) > 0 {
			st.top = st.stack[len(st.stack)-1]
		}
		goto after
	case '}':
		if st.top < 0 || len(out)-n < 16 {
			return n, i, atAfter
		}
		// Members whose prefixes rise are in order and distinct. Others
		// are sorted by sortMembers, the one call here: it reorders out in
		// place, and on a duplicate it leaves out alone for appendJSON to
		// report.
		ms := st.members[st.top:]
		for k := 1; k < len(ms); k++ {
			if ms[k-1].pfx >= ms[k].pfx {
				if st.sortMembers(out[:n], ms) != nil {
					return n, i, atAfter
				}
				break
			}
		}
		st.members = st.members[:st.top]
		out[n] = tagObjectEnd
		n++
		i++
		st.stack = st.stack[:len(st.stack)-1]
		st.top = noContainer
		if len(st.stack) > 0 {
			st.top = st.stack[len(st.stack)-1]
		}
		goto after
	}
	return n, i, atAfter
}

// tail returns the bytes of body from i on, fewer than 16, in a 16-byte
// array padded with zeros: a string's text near the end of the body, for
// the word-at-a-time search of scan. The zeros are control characters, so
// the search stops at them and never takes them for a closing quote.
func tail(body []byte, i int) *[16]byte {
	var t [16]byte
	for k := 0; k < 16 && i+k < len(body); k++ {
		t[k] = body[i+k]
	}
	return &t
}

// colon skips the colon after a member name, and the space around it, from
// body[i] on.
func colon(body []byte, i int) (int, error) {
	i = skipSpace(body, i)
	if i >= len(body) {
		return i, errEnd(i)
	}
	if body[i] != ':' {
		return i, fmt.Errorf("%w: expected ':' at offset %d", ErrInvalidJSON, i)
	}
	return skipSpace(body, i+1), nil
}

// appendString appends the string whose opening quote is body[i] and
// returns the offset after its closing quote.
func appendString(b, body []byte, i int) ([]byte, int, error) {
	j := plainPrefix(body, i+1)
	if j < len(body) && body[j] == '"' && j-i-1 <= maxShort {
		b = append(b, tagShortString|byte(j-i-1))
		return append(b, body[i+1:j]...), j + 1, nil
	}
	return appendStringSlow(b, body, i, j)
}

// growOut returns out, holding the same first n bytes, with at least
// fastRoom bytes free after them.
func growOut(out []byte, n int) []byte {
	out = slices.Grow(out[:n], max(n, fastRoom))
	return out[:cap(out)]
}

// addMember appends a member to ms. It fills the new element in place: a
// composite literal would be built on the stack and copied with wide moves
// that stall on store forwarding, which showed up as the hottest
// instruction in profiles.
func addMember(ms []member, key, val, at int, pfx uint64) []member {
	ms = slices.Grow(ms, 1)
	ms = ms[:len(ms)+1]
	m := &ms[len(ms)-1]
	m.key, m.val, m.at, m.pfx = key, val, at, pfx
	return ms
}

// sortMembers puts the members of the object that just closed, all of it at
// the end of b, in the order of their encoded names, and rejects duplicate
// names. Encoded names are equal exactly when the decoded names are.
func (st *fpState) sortMembers(b []byte, ms []member) error {
	n := len(ms)
	if n < 2 {
		return nil
	}
	if n > maxSmallObject {
		return st.sortLarge(b, ms)
	}
	// Sort member indices rather than members: ms stays in body order, so
	// member k ends where member k+1 starts. Insertion sort allocates
	// nothing and is quick on the few members of most objects.
	order := st.order[:n] // within capacity
	moved := false
	for k := range n {
		x := &ms[k]
		j := k
		for ; j > 0; j-- {
			y := &ms[order[j-1]]
			c := compareNames(b, y, x)
			if c < 0 {
				break
			}
			if c == 0 {
				return errDuplicate(b, y, x)
			}
			order[j] = order[j-1]
		}
		order[j] = k
		moved = moved || j != k
	}
	if moved {
		st.permute(b, ms, order)
	}
	return nil
}

// sortLarge is sortMembers for objects too large for an insertion sort.
func (st *fpState) sortLarge(b []byte, ms []member) error {
	order := st.order[:0]
	for k := range ms {
		order = append(order, k)
	}
	st.order = order
	slices.SortFunc(order, func(x, y int) int { return compareNames(b, &ms[x], &ms[y]) })
	moved := false
	for k := 1; k < len(order); k++ {
		x, y := &ms[order[k-1]], &ms[order[k]]
		if compareNames(b, x, y) == 0 {
			return errDuplicate(b, x, y)
		}
		moved = moved || order[k-1] > order[k]
	}
	if moved {
		st.permute(b, ms, order)
	}
	return nil
}

// permute rewrites the members ms, which end b, in the given order.
// Members already in place at either end stay put; the rest are gathered
// in order into st.tmp and put back in one copy. b must have 16 bytes of
// capacity after its end, which the gathering may read.
func (st *fpState) permute(b []byte, ms []member, order []int) {
	n := len(ms)
	lo, hi := 0, n
	for order[lo] == lo {
		lo++
	}
	for order[hi-1] == hi-1 {
		hi--
	}
	start, end := ms[lo].key, len(b)
	if hi < n {
		end = ms[hi].key
	}
	if order[lo] == hi-1 && end-ms[hi-1].key <= 16 && consecutive(order[lo+1:hi], lo) {
		// The last member moves to the front and the others stay in
		// order: typically a short member after a long one holding
		// nested values. Shifting the long run in place copies it once
		// instead of twice.
		mid := ms[hi-1].key
		if mid-start <= 16 {
			// Both runs fit a 16-byte move: swap them in registers. The
			// second move runs past end; the 16 bytes there are put back.
			src := b[:cap(b)]
			first := *(*[16]byte)(src[start : start+16])
			last := *(*[16]byte)(src[mid : mid+16])
			after := *(*[16]byte)(src[end : end+16])
			*(*[16]byte)(src[start : start+16]) = last
			*(*[16]byte)(src[start+end-mid : start+end-mid+16]) = first
			*(*[16]byte)(src[end : end+16]) = after
			return
		}
		var last [16]byte
		copy(last[:], b[mid:end])
		copy(b[start+end-mid:end], b[start:mid])
		copy(b[start:], last[:end-mid])
		return
	}
	if cap(st.tmp) < end-start+16 {
		st.tmp = make([]byte, 0, 2*(end-start)+16)
	}
	tmp := st.tmp[:cap(st.tmp)]
	src := b[:cap(b)]
	w := 0
	for _, k := range order[lo:hi] {
		to := len(b)
		if k+1 < n {
			to = ms[k+1].key
		}
		copyWords(tmp[w:], src[ms[k].key:], to-ms[k].key)
		w += to - ms[k].key
	}
	copy(b[start:end], tmp[:w])
}

// consecutive reports whether order is first, first+1, and so on.
func consecutive(order []int, first int) bool {
	for k, o := range order {
		if o != first+k {
			return false
		}
	}
	return true
}

// copyWords copies the first n bytes of src to dst sixteen bytes at a time,
// so it may read and write up to 15 bytes more: for the short spans of
// permute, that is cheaper than a call to memmove.
func copyWords(dst, src []byte, n int) {
	for k := 0; k < n; k += 16 {
		*(*[16]byte)(dst[k : k+16]) = *(*[16]byte)(src[k : k+16])
	}
}

func errDuplicate(b []byte, x, y *member) error {
	return fmt.Errorf("%w: %q at offset %d", ErrDuplicateMember, stringText(b[x.key:x.val]), max(x.at, y.at))
}

// stringText returns the text of the encoded string enc.
func stringText(enc []byte) []byte {
	if enc[0] != tagString {
		return enc[1:]
	}
	_, k := binary.Uvarint(enc[1:])
	return enc[1+k:]
}

func errEnd(i int) error {
	return fmt.Errorf("%w: unexpected end at offset %d", ErrInvalidJSON, i)
}

func errUnexpected(body []byte, i int) error {
	return fmt.Errorf("%w: unexpected %q at offset %d", ErrInvalidJSON, body[i], i)
}

// skipSpace returns the offset of the first byte at or after i that is not
// JSON whitespace (space, tab, CR, LF).
func skipSpace(body []byte, i int) int {
	for i < len(body) {
		if c := body[i]; c > ' ' || (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
			return i
		}
		i++
	}
	return i
}

// appendStringSlow appends the string whose opening quote is body[open],
// for strings that the fast paths do not handle; the bytes
// before body[i] are plain ASCII. It returns the offset after the closing
// quote.
func appendStringSlow(b, body []byte, open, i int) ([]byte, int, error) {
	// Reserve one byte for the tag; setLength fixes it up at the end,
	// shifting the text when a long string needs more.
	b = append(b, 0)
	lenAt := len(b) - 1
	run := open + 1 // start of the bytes not yet copied to b
	for {
		if i >= len(body) {
			return b, i, fmt.Errorf("%w: unterminated string at offset %d", ErrInvalidJSON, open)
		}
		switch c := body[i]; {
		case c == '"':
			b = append(b, body[run:i]...)
			return setLength(b, lenAt), i + 1, nil
		case c == '\\':
			b = append(b, body[run:i]...)
			var err error
			if b, i, err = appendEscape(b, body, i); err != nil {
				return b, i, err
			}
			run = i
		case c < 0x20:
			return b, i, fmt.Errorf("%w: unescaped control character at offset %d", ErrInvalidJSON, i)
		default:
			r, size := utf8.DecodeRune(body[i:])
			if r == utf8.RuneError && size == 1 {
				return b, i, fmt.Errorf("%w: invalid UTF-8 at offset %d", ErrInvalidJSON, i)
			}
			i += size
		}
		i = plainPrefix(body, i)
	}
}

// specialBytes returns a mask with the high bit set in the bytes of the
// little-endian word x that are below 0x20, a quote, a backslash or
// non-ASCII. Subtraction borrows start only in a byte that is special and
// can set bits only above it, so the lowest set bit is exact, and a zero
// mask means no byte is special. (A byte of x^'"' or x^'\\' can have its
// high bit set without being zero only when x is non-ASCII, which the
// final |x flags anyway.)
func specialBytes(x uint64) uint64 {
	const (
		ones = 0x0101010101010101
		high = 0x8080808080808080
	)
	return ((x - ' '*ones) | (x ^ '"'*ones - ones) | (x ^ '\\'*ones - ones) | x) & high
}

// plainPrefix returns the offset of the first byte at or after i that is
// not printable ASCII or is a quote or backslash, or len(body), testing
// eight bytes at a time.
func plainPrefix(body []byte, i int) int {
	for ; i+8 <= len(body); i += 8 {
		if m := specialBytes(binary.LittleEndian.Uint64(body[i:])); m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	for ; i < len(body); i++ {
		if c := body[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' {
			return i
		}
	}
	return i
}

// setLength writes the tag and length of the string text after b[lenAt],
// where one byte was reserved.
func setLength(b []byte, lenAt int) []byte {
	n := len(b) - lenAt - 1
	if n <= maxShort {
		b[lenAt] = tagShortString | byte(n)
		return b
	}
	var tmp [1 + binary.MaxVarintLen64]byte
	tmp[0] = tagString
	k := 1 + binary.PutUvarint(tmp[1:], uint64(n))
	b = append(b, tmp[:k-1]...) // grow by k-1 bytes
	copy(b[lenAt+k:], b[lenAt+1:lenAt+1+n])
	copy(b[lenAt:], tmp[:k])
	return b
}

// appendEscape appends the character escaped at body[i] (a backslash) and
// returns the offset after the escape. A high surrogate escape directly
// followed by a low surrogate escape is one character; any other surrogate
// escape is kept as its code unit (see the encoding comment).
func appendEscape(b, body []byte, i int) ([]byte, int, error) {
	if i+1 >= len(body) {
		return b, i, fmt.Errorf("%w: unterminated escape at offset %d", ErrInvalidJSON, i)
	}
	switch c := body[i+1]; c {
	case '"', '\\', '/':
		return append(b, c), i + 2, nil
	case 'b':
		return append(b, '\b'), i + 2, nil
	case 'f':
		return append(b, '\f'), i + 2, nil
	case 'n':
		return append(b, '\n'), i + 2, nil
	case 'r':
		return append(b, '\r'), i + 2, nil
	case 't':
		return append(b, '\t'), i + 2, nil
	case 'u':
		r, ok := hex4(body, i+2)
		if !ok {
			return b, i, fmt.Errorf("%w: bad \\u escape at offset %d", ErrInvalidJSON, i)
		}
		i += 6
		if 0xD800 <= r && r < 0xDC00 && i+1 < len(body) && body[i] == '\\' && body[i+1] == 'u' {
			if lo, ok := hex4(body, i+2); ok && 0xDC00 <= lo && lo < 0xE000 {
				return utf8.AppendRune(b, 0x10000+(r-0xD800)<<10+(lo-0xDC00)), i + 6, nil
			}
		}
		if 0xD800 <= r && r < 0xE000 {
			// Generalized UTF-8 of the lone code unit: 0xED 0xA0-0xBF 0x80-0xBF.
			return append(b, 0xE0|byte(r>>12), 0x80|byte(r>>6&0x3F), 0x80|byte(r&0x3F)), i, nil
		}
		return utf8.AppendRune(b, r), i, nil
	}
	return b, i, fmt.Errorf("%w: bad escape at offset %d", ErrInvalidJSON, i)
}

// hex4 decodes the four hex digits at body[i:i+4].
func hex4(body []byte, i int) (rune, bool) {
	if len(body)-i < 4 {
		return 0, false
	}
	var r rune
	for _, c := range body[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// appendNumber appends the number starting at body[i] in its canonical form:
// sign, significant digits and the exponent of the last digit, so that every
// spelling of one decimal value encodes alike.
func appendNumber(b, body []byte, i int) ([]byte, int, error) {
	start := i
	neg := body[i] == '-'
	if neg {
		i++
	}
	// Integer part: 0 or a non-zero digit and more digits.
	intStart := i
	switch {
	case i < len(body) && body[i] == '0':
		i++
	case i < len(body) && '1' <= body[i] && body[i] <= '9':
		i = skipDigits(body, i+1)
	default:
		if i >= len(body) {
			return b, i, errEnd(i)
		}
		return b, i, errUnexpected(body, i)
	}
	intEnd := i
	fracStart, fracEnd := i, i
	if i < len(body) && body[i] == '.' {
		fracStart = i + 1
		i = skipDigits(body, fracStart)
		if i == fracStart {
			return b, i, fmt.Errorf("%w: no digits after the decimal point at offset %d", ErrInvalidJSON, i)
		}
		fracEnd = i
	}
	var exp int64
	expTooBig := false
	if i < len(body) && (body[i] == 'e' || body[i] == 'E') {
		i++
		expNeg := false
		if i < len(body) && (body[i] == '+' || body[i] == '-') {
			expNeg = body[i] == '-'
			i++
		}
		digits := i
		for ; i < len(body) && '0' <= body[i] && body[i] <= '9'; i++ {
			if exp > (maxExponent-int64(body[i]-'0'))/10 {
				expTooBig = true
			} else {
				exp = exp*10 + int64(body[i]-'0')
			}
		}
		if i == digits {
			return b, i, fmt.Errorf("%w: no digits in the exponent at offset %d", ErrInvalidJSON, i)
		}
		if expNeg {
			exp = -exp
		}
	}

	// The digits are D = int part ++ fraction part, and the value is
	// D × 10^(exp - len(fraction)). Index k in D is body[intStart+k] for
	// k < intLen and body[fracStart+k-intLen] after.
	intLen, fracLen := intEnd-intStart, fracEnd-fracStart
	digit := func(k int) byte {
		if k < intLen {
			return body[intStart+k]
		}
		return body[fracStart+k-intLen]
	}
	first, last := 0, intLen+fracLen-1
	for first <= last && digit(first) == '0' {
		first++
	}
	if first > last {
		return append(b, tagZero), i, nil
	}
	for digit(last) == '0' {
		last--
	}
	if expTooBig {
		return b, i, fmt.Errorf("%w: exponent out of range at offset %d", ErrInvalidJSON, start)
	}
	// The last significant digit is D[last], worth 10^(exp - len(fraction)
	// + (len(D)-1-last)) = 10^(exp + intLen-1-last).
	shift := int64(intLen - 1 - last)
	e := exp + shift
	if (shift > 0 && e < exp) || (shift < 0 && e > exp) {
		return b, i, fmt.Errorf("%w: exponent out of range at offset %d", ErrInvalidJSON, start)
	}

	switch n := last - first + 1; {
	case n <= maxShort && neg:
		b = append(b, tagShortNegative|byte(n))
	case n <= maxShort:
		b = append(b, tagShortPositive|byte(n))
	case neg:
		b = append(b, tagNegative)
		b = binary.AppendUvarint(b, uint64(n))
	default:
		b = append(b, tagPositive)
		b = binary.AppendUvarint(b, uint64(n))
	}
	switch {
	case last < intLen:
		b = append(b, body[intStart+first:intStart+last+1]...)
	case first >= intLen:
		b = append(b, body[fracStart+first-intLen:fracStart+last-intLen+1]...)
	default:
		b = append(b, body[intStart+first:intEnd]...)
		b = append(b, body[fracStart:fracStart+last-intLen+1]...)
	}
	return binary.AppendVarint(b, e), i, nil
}

func skipDigits(body []byte, i int) int {
	for i < len(body) && '0' <= body[i] && body[i] <= '9' {
		i++
	}
	return i
}
