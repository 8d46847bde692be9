package fuzz

// This file is idem's fingerprint implementation as of commit dc9bd2c, before
// the fast path, kept as the reference that FuzzFingerprint
// compares against: the optimized code must return the same fingerprint, or
// the same error, for every input. Only names changed (refFingerprinter for
// Fingerprinter, idem's error sentinels), and the Fingerprint wrapper is
// gone. Do not "fix" or speed it up: it is the specification by example of
// idemfp1-sha256.

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

	"github.com/idemkit/idem"
)

// refAlgorithm names the current digest; every fingerprint starts
// with it and a colon. A new canonical encoding gets a new name, so stored
// fingerprints never silently compare against a different scheme.
const refAlgorithm = "idemfp1-sha256"

// Bounds used by the zero refFingerprinter and by Fingerprint.
const (
	// refMaxBodyBytes is the largest body fingerprinted by default (1 MiB).
	refMaxBodyBytes = 1 << 20

	// refMaxDepth is the deepest JSON nesting fingerprinted by default.
	refMaxDepth = 64
)

// refFingerprinter computes fingerprints with explicit bounds; the zero value
// uses the defaults. A refFingerprinter is a plain value and safe for
// concurrent use.
type refFingerprinter struct {
	// MaxBytes is the largest body fingerprinted. Zero or negative means
	// refMaxBodyBytes (1 MiB).
	MaxBytes int

	// MaxDepth is the deepest JSON nesting accepted: MaxDepth nested arrays
	// or objects pass, one more fails. Zero or negative means
	// refMaxDepth (64). Each object moves its members into order when
	// it closes, so a body that nests unordered objects deeply costs up to
	// MaxDepth times a flat one; keep the bound modest.
	MaxDepth int
}

// Sum returns refAlgorithm, a colon and the lowercase hex SHA-256 of
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
// Sum returns an error wrapping idem.ErrBodyTooLarge when body is longer than
// MaxBytes, idem.ErrBodyTooDeep when JSON nests deeper than MaxDepth,
// idem.ErrDuplicateMember when a JSON object names a member twice (compared after
// unescaping), and idem.ErrInvalidJSON when a JSON body is malformed: trailing
// data, a byte order mark, invalid UTF-8, raw control characters in strings,
// or a number outside the JSON grammar. Numbers whose exponent has more than
// 18 digits (after leading zeros) are rejected with idem.ErrInvalidJSON unless
// they are zero.
func (f refFingerprinter) Sum(method, route, contentType string, body []byte) (string, error) {
	maxBytes := f.MaxBytes
	if maxBytes <= 0 {
		maxBytes = refMaxBodyBytes
	}
	if len(body) > maxBytes {
		return "", fmt.Errorf("%w: %d bytes, bound is %d", idem.ErrBodyTooLarge, len(body), maxBytes)
	}
	maxDepth := f.MaxDepth
	if maxDepth <= 0 {
		maxDepth = refMaxDepth
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
	var out [len(refAlgorithm) + 1 + 2*sha256.Size]byte
	copy(out[:], refAlgorithm)
	out[len(refAlgorithm)] = ':'
	encodeHex(out[len(refAlgorithm)+1:], &sum)
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
// use an insertion sort on the stack.
const maxSmallObject = 16

// fpState is the reusable scratch space of one Sum call. States are pooled
// so a warm Sum allocates only its result string.
type fpState struct {
	buf     []byte            // canonical encoding being built
	tmp     []byte            // copy of an object's members while they are reordered
	members []member          // members of every open object, innermost last
	order   []int             // sorted member order of the object being closed
	stack   []int             // per open container: -1 for an array, else the index in members of the object's first member
	h       hash.Hash         // for bodies hashed byte for byte, not copied to buf
	sum     [sha256.Size]byte // h's output; a local would escape through the interface
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

// appendJSON appends the canonical value of the JSON text body to b.
func (st *fpState) appendJSON(b, body []byte, maxDepth int) (_ []byte, err error) {
	// The nesting stack and open members stay in st: only containers and
	// member names touch them, and as locals they would crowd the registers
	// the string path needs.
	st.stack, st.members = st.stack[:0], st.members[:0]
	name := false // whether body[i] must start a member name

	i := skipSpace(body, 0)
	for {
		// A value, or a member name if name is set, starts at body[i].
		if i >= len(body) {
			return b, errEnd(i)
		}
		c := body[i]
		if c == '"' {
			// Strings are most of a typical body, and member names are
			// strings, so there is one copy of the fast path, inline: plain
			// ASCII without escapes, short enough for a one-byte tag.
			open, key := i, len(b)
			j := i + 1
			var word uint64 // the first eight bytes of text, if loaded
			loaded := j+8 <= len(body)
			if loaded {
				word = binary.LittleEndian.Uint64(body[j:])
				if m := specialBytes(word); m != 0 {
					j += bits.TrailingZeros64(m) / 8
				} else {
					j = plainPrefix(body, j+8)
				}
			} else {
				j = plainPrefix(body, j)
			}
			fast := j < len(body) && body[j] == '"' && j-i-1 <= maxShort
			if fast {
				b = append(b, tagShortString|byte(j-i-1))
				b = appendShort(b, body, i+1, j)
				i = j + 1
			} else if b, i, err = appendStringSlow(b, body, i, j); err != nil {
				return b, err
			}
			if name {
				// The name's sort prefix: from the word already loaded when
				// there is one, since loading it back from b right after
				// the bytes were stored there stalls on store forwarding.
				var pfx uint64
				if n := len(b) - key; fast && loaded {
					pfx = uint64(b[key])<<56 | bits.ReverseBytes64(word)>>8
					if n < 8 {
						pfx &= ^uint64(0) << (64 - 8*n)
					}
				} else {
					pfx = namePrefix(b[key:])
				}
				st.members = addMember(st.members, key, len(b), open, pfx)
				i = skipSpace(body, i)
				if i >= len(body) {
					return b, errEnd(i)
				}
				if body[i] != ':' {
					return b, fmt.Errorf("%w: expected ':' at offset %d", idem.ErrInvalidJSON, i)
				}
				i = skipSpace(body, i+1)
				name = false
				continue
			}
		} else if name {
			return b, fmt.Errorf("%w: expected a member name at offset %d", idem.ErrInvalidJSON, i)
		} else {
			switch c {
			case '[', '{':
				if len(st.stack) >= maxDepth {
					return b, fmt.Errorf("%w: more than %d levels at offset %d", idem.ErrBodyTooDeep, maxDepth, i)
				}
				i = skipSpace(body, i+1)
				if c == '[' {
					b = append(b, tagArray)
					if i < len(body) && body[i] == ']' {
						b = append(b, tagArrayEnd)
						i++
						break
					}
					st.stack = append(st.stack, -1)
					continue
				}
				b = append(b, tagObject)
				if i < len(body) && body[i] == '}' {
					b = append(b, tagObjectEnd)
					i++
					break
				}
				st.stack = append(st.stack, len(st.members))
				name = true
				continue
			case 't':
				if i, err = literal(body, i, "true"); err != nil {
					return b, err
				}
				b = append(b, tagTrue)
			case 'f':
				if i, err = literal(body, i, "false"); err != nil {
					return b, err
				}
				b = append(b, tagFalse)
			case 'n':
				if i, err = literal(body, i, "null"); err != nil {
					return b, err
				}
				b = append(b, tagNull)
			default:
				if '1' <= c && c <= '9' {
					// Fast path for the common small integers: no sign,
					// fraction, exponent or trailing zero, so the digits
					// are already canonical and the exponent is 0.
					j := skipDigits(body, i+1)
					if (j == len(body) || body[j] != '.' && body[j]|0x20 != 'e') && j-i <= maxShort && body[j-1] != '0' {
						b = append(b, tagShortPositive|byte(j-i))
						b = appendShort(b, body, i, j)
						b = append(b, 0)
						i = j
						break
					}
				}
				if b, i, err = appendNumber(b, body, i); err != nil {
					return b, err
				}
			}
		}

		// A value ended at body[i]: close containers until one continues.
	closing:
		for {
			i = skipSpace(body, i)
			if len(st.stack) == 0 {
				if i != len(body) {
					return b, fmt.Errorf("%w: data after the value at offset %d", idem.ErrInvalidJSON, i)
				}
				return b, nil
			}
			if i >= len(body) {
				return b, errEnd(i)
			}
			top := st.stack[len(st.stack)-1]
			switch c := body[i]; {
			case c == ',':
				i = skipSpace(body, i+1)
				name = top >= 0
				break closing
			case c == ']' && top < 0:
				b = append(b, tagArrayEnd)
			case c == '}' && top >= 0:
				if b, err = st.sortMembers(b, st.members[top:]); err != nil {
					return b, err
				}
				st.members = st.members[:top]
				b = append(b, tagObjectEnd)
			default:
				return b, errUnexpected(body, i)
			}
			st.stack = st.stack[:len(st.stack)-1]
			i++
		}
	}
}

// appendShort appends src[from:to] to b. Short spans, most strings and
// members, are copied as two eight-byte words when both sides have room,
// which is much cheaper than a call to memmove. Bytes written past the end
// of the span are beyond len(b) and do not count.
func appendShort(b, src []byte, from, to int) []byte {
	n := to - from
	if n <= 16 && from+16 <= len(src) && len(b)+16 <= cap(b) {
		s := src[from : from+16]
		d := b[len(b) : len(b)+16]
		binary.LittleEndian.PutUint64(d, binary.LittleEndian.Uint64(s))
		binary.LittleEndian.PutUint64(d[8:], binary.LittleEndian.Uint64(s[8:]))
		return b[:len(b)+n]
	}
	return append(b, src[from:to]...)
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
func (st *fpState) sortMembers(b []byte, ms []member) ([]byte, error) {
	n := len(ms)
	if n < 2 {
		return b, nil
	}
	if n > maxSmallObject {
		return st.sortLarge(b, ms)
	}
	// Sort member indices rather than members: ms stays in body order, so
	// member k ends where member k+1 starts. Insertion sort allocates
	// nothing, and an object already in order costs one comparison per
	// member.
	var orderArray [maxSmallObject]int
	order := orderArray[:n]
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
				return b, errDuplicate(b, y, x)
			}
			order[j] = order[j-1]
		}
		order[j] = k
		moved = moved || j != k
	}
	if !moved {
		return b, nil
	}
	return st.permute(b, ms, order), nil
}

// sortLarge is sortMembers for objects too large for an insertion sort.
func (st *fpState) sortLarge(b []byte, ms []member) ([]byte, error) {
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
			return b, errDuplicate(b, x, y)
		}
		moved = moved || order[k-1] > order[k]
	}
	if !moved {
		return b, nil
	}
	return st.permute(b, ms, order), nil
}

// permute rewrites the members ms, which end b, in the given order.
// Members already in place at either end stay put; the rest are gathered
// in order and put back in one copy.
func (st *fpState) permute(b []byte, ms []member, order []int) []byte {
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
	tmp := slices.Grow(st.tmp[:0], end-start+16)
	src := b[:cap(b)] // appendShort may read past len(b), never past cap(b)
	for _, k := range order[lo:hi] {
		to := len(b)
		if k+1 < n {
			to = ms[k+1].key
		}
		tmp = appendShort(tmp, src, ms[k].key, to)
	}
	copy(b[start:end], tmp)
	if cap(tmp) > cap(st.tmp) {
		st.tmp = tmp
	}
	return b
}

func errDuplicate(b []byte, x, y *member) error {
	return fmt.Errorf("%w: %q at offset %d", idem.ErrDuplicateMember, stringText(b[x.key:x.val]), max(x.at, y.at))
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
	return fmt.Errorf("%w: unexpected end at offset %d", idem.ErrInvalidJSON, i)
}

func errUnexpected(body []byte, i int) error {
	return fmt.Errorf("%w: unexpected %q at offset %d", idem.ErrInvalidJSON, body[i], i)
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

func literal(body []byte, i int, word string) (int, error) {
	if len(body)-i < len(word) || string(body[i:i+len(word)]) != word {
		return i, fmt.Errorf("%w: bad literal at offset %d", idem.ErrInvalidJSON, i)
	}
	return i + len(word), nil
}

// appendStringSlow appends the string whose opening quote is body[open],
// for strings that the fast path in appendJSON does not handle; the bytes
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
			return b, i, fmt.Errorf("%w: unterminated string at offset %d", idem.ErrInvalidJSON, open)
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
			return b, i, fmt.Errorf("%w: unescaped control character at offset %d", idem.ErrInvalidJSON, i)
		default:
			r, size := utf8.DecodeRune(body[i:])
			if r == utf8.RuneError && size == 1 {
				return b, i, fmt.Errorf("%w: invalid UTF-8 at offset %d", idem.ErrInvalidJSON, i)
			}
			i += size
		}
		i = plainPrefix(body, i)
	}
}

// specialBytes returns a mask with the high bit set in the bytes of the
// little-endian word x that are below 0x20, a quote, a backslash or
// non-ASCII. Subtraction borrows can set bits only above a byte that is
// truly special, so the lowest set bit is exact and a zero mask means no
// byte is special. (The non-ASCII test, x itself, also covers bytes that
// x - 0x20 flags without a borrow, so no &^x is needed there.)
func specialBytes(x uint64) uint64 {
	const (
		ones = 0x0101010101010101
		high = 0x8080808080808080
	)
	q := x ^ ('"' * ones)
	s := x ^ ('\\' * ones)
	return ((x - ' '*ones) | (q-ones)&^q | (s-ones)&^s | x) & high
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
		return b, i, fmt.Errorf("%w: unterminated escape at offset %d", idem.ErrInvalidJSON, i)
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
			return b, i, fmt.Errorf("%w: bad \\u escape at offset %d", idem.ErrInvalidJSON, i)
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
	return b, i, fmt.Errorf("%w: bad escape at offset %d", idem.ErrInvalidJSON, i)
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
			return b, i, fmt.Errorf("%w: no digits after the decimal point at offset %d", idem.ErrInvalidJSON, i)
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
			return b, i, fmt.Errorf("%w: no digits in the exponent at offset %d", idem.ErrInvalidJSON, i)
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
		return b, i, fmt.Errorf("%w: exponent out of range at offset %d", idem.ErrInvalidJSON, start)
	}
	// The last significant digit is D[last], worth 10^(exp - len(fraction)
	// + (len(D)-1-last)) = 10^(exp + intLen-1-last).
	shift := int64(intLen - 1 - last)
	e := exp + shift
	if (shift > 0 && e < exp) || (shift < 0 && e > exp) {
		return b, i, fmt.Errorf("%w: exponent out of range at offset %d", idem.ErrInvalidJSON, start)
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
