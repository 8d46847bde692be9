package canon

import (
	"encoding/binary"
	"mime"
	"strings"
)

// The canonical encoding. Every part is self-delimiting, so the
// concatenation is injective: two different requests (in the sense of the
// package comment) never produce the same bytes.
//
//	request  = field(method) field(route) class body
//	field(s) = uvarint(len(s)) s
//	class    = 'J'                   JSON, whatever the exact media type
//	         | 'M' field(mediatype)  lower-cased, parameters dropped
//	         | 'P' field(mediatype) uvarint(n) (field(name) field(value)){n}
//	                                 the media type with the n parameters
//	                                 that change the meaning of its bytes
//	                                 (see meaningful), by name; not in V1
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
	tagParams        = 'P'
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

// Scratch buffers larger than these are dropped by Trim rather than kept,
// so one huge body does not pin its memory.
const (
	maxPooledBuf  = 64 << 10
	maxPooledList = 4 << 10
)

// Encoder holds the scratch space of Request. The zero value is ready to
// use; an Encoder is not safe for concurrent use, so callers pool them.
type Encoder struct {
	buf      []byte   // canonical encoding being built
	tmp      []byte   // copy of an object's members while they are reordered
	members  []member // members of every open object, innermost last
	order    []int    // sorted member order of the object being closed
	stack    []int    // per open container: -1 for an array, else the index in members of the object's first member
	top      int      // the last entry of stack, or noContainer
	maxDepth int      // the bound on len(stack)
}

// Request returns the canonical encoding of a request as head followed by
// tail. tail is nil, or the body itself when the body is compared byte for
// byte, so that the caller can hash it without a copy. head is valid until
// the next call. A JSON body nested deeper than maxDepth (which must be
// positive) is an error; so is malformed JSON. The caller bounds the size.
func (e *Encoder) Request(method, route, contentType string, body []byte, maxDepth int) (head, tail []byte, err error) {
	return e.request(method, route, contentType, body, maxDepth, true)
}

// RequestV1 is Request as it was before media-type parameters took part
// (the encoding of idemfp1): every parameter is dropped. For a content type
// without a meaningful parameter (ParamsMatter false) both are the same.
func (e *Encoder) RequestV1(method, route, contentType string, body []byte, maxDepth int) (head, tail []byte, err error) {
	return e.request(method, route, contentType, body, maxDepth, false)
}

func (e *Encoder) request(method, route, contentType string, body []byte, maxDepth int, params bool) (head, tail []byte, err error) {
	b := e.buf[:0]
	b = appendField(b, method)
	b = appendField(b, route)
	b, isJSON := appendClass(b, contentType, params)
	switch {
	case len(body) == 0:
		b = append(b, tagEmpty)
	case isJSON:
		b, err = e.appendJSON(b, body, maxDepth)
	default:
		b = append(b, tagBytes)
		b = binary.AppendUvarint(b, uint64(len(body)))
		tail = body
	}
	e.buf = b
	return b, tail, err
}

// Trim drops scratch buffers that grew large, before e is pooled.
func (e *Encoder) Trim() {
	if cap(e.buf) > maxPooledBuf {
		e.buf = nil
	}
	if cap(e.tmp) > maxPooledBuf {
		e.tmp = nil
	}
	if cap(e.members) > maxPooledList {
		e.members = nil
	}
	if cap(e.stack) > maxPooledList {
		e.stack = nil
	}
	if cap(e.order) > maxPooledList {
		e.order = nil
	}
}

func appendField(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// appendClass appends the class of contentType and reports whether bodies
// of that class are JSON. With params, the meaningful parameters of a
// non-JSON type take part.
func appendClass(b []byte, contentType string, params bool) ([]byte, bool) {
	if contentType == "application/json" {
		return append(b, tagJSONClass), true
	}
	var ps map[string]string
	mt, ok := simpleMediaType(contentType)
	if !ok {
		parsed, all, err := mime.ParseMediaType(contentType)
		if err != nil {
			b = append(b, tagRawType)
			return appendField(b, contentType), false
		}
		mt, ps = parsed, all
	}
	if isJSONType(mt) {
		return append(b, tagJSONClass), true
	}
	if names := meaningful(mt, ps); params && len(names) > 0 {
		b = append(b, tagParams)
		b = appendField(b, mt)
		b = binary.AppendUvarint(b, uint64(len(names)))
		for _, n := range names {
			v := ps[n]
			if n == "charset" {
				v = strings.ToLower(v)
			}
			b = appendField(appendField(b, n), v)
		}
		return b, false
	}
	b = append(b, tagMediaType)
	b = binary.AppendUvarint(b, uint64(len(mt)))
	for i := 0; i < len(mt); i++ {
		b = append(b, lowerASCII(mt[i]))
	}
	return b, false
}

// meaningful returns, sorted, the names of the parameters of the non-JSON
// media type mt (lower case) that change what its bytes mean: a multipart
// type's boundary (the same bytes split at another boundary are another
// form), and a charset other than UTF-8 (the same bytes in another charset
// are other text). A UTF-8 charset, and every other parameter, does not
// count: it would only make equal requests differ.
func meaningful(mt string, ps map[string]string) []string {
	var names []string
	if v, ok := ps["boundary"]; ok && v != "" && strings.HasPrefix(mt, "multipart/") {
		names = append(names, "boundary")
	}
	if v, ok := ps["charset"]; ok && v != "" && !equalFoldASCII(v, "utf-8") && !equalFoldASCII(v, "utf8") {
		names = append([]string{"charset"}, names...)
	}
	return names
}

// ParamsMatter reports whether contentType carries a parameter that takes
// part in Request but not in RequestV1.
func ParamsMatter(contentType string) bool {
	if _, ok := simpleMediaType(contentType); ok {
		return false
	}
	mt, ps, err := mime.ParseMediaType(contentType)
	return err == nil && !isJSONType(mt) && len(meaningful(mt, ps)) > 0
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
