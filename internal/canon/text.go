package canon

import (
	"encoding/binary"
	"math/bits"
	"unicode/utf8"
)

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

// tail returns the bytes of body from i on, fewer than 16, in a 16-byte
// array padded with zeros: a string's text near the end of the body, for
// scan. The zeros are control characters, so the search stops at
// them and never takes them for a closing quote.
func tail(body []byte, i int) *[16]byte {
	var t [16]byte
	for k := 0; k < 16 && i+k < len(body); k++ {
		t[k] = body[i+k]
	}
	return &t
}

// appendStringSlow appends the string whose opening quote is body[open],
// for strings that the fast paths do not handle; the bytes before body[i]
// are plain ASCII. It returns the offset after the closing quote.
func appendStringSlow(b, body []byte, open, i int) ([]byte, int, error) {
	// Reserve one byte for the tag; setLength fixes it up at the end,
	// shifting the text when a long string needs more.
	b = append(b, 0)
	lenAt := len(b) - 1
	run := open + 1 // start of the bytes not yet copied to b
	for {
		if i >= len(body) {
			return b, i, invalid("unterminated string at offset %d", open)
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
			return b, i, invalid("unescaped control character at offset %d", i)
		default:
			r, size := utf8.DecodeRune(body[i:])
			if r == utf8.RuneError && size == 1 {
				return b, i, invalid("invalid UTF-8 at offset %d", i)
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
// returns the offset after the escape.
func appendEscape(b, body []byte, i int) ([]byte, int, error) {
	if i+1 >= len(body) {
		return b, i, invalid("unterminated escape at offset %d", i)
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
		return appendUnicodeEscape(b, body, i)
	}
	return b, i, invalid("bad escape at offset %d", i)
}

// appendUnicodeEscape appends the character of the \u escape at body[i]. A
// high surrogate escape directly followed by a low surrogate escape is one
// character; any other surrogate escape is kept as its code unit (see the
// encoding comment).
func appendUnicodeEscape(b, body []byte, i int) ([]byte, int, error) {
	r, ok := hex4(body, i+2)
	if !ok {
		return b, i, invalid("bad \\u escape at offset %d", i)
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
