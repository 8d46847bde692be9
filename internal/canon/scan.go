package canon

import (
	"encoding/binary"
	"math/bits"
)

// Little-endian words of the JSON literals, for one comparison each.
const (
	wordTrue = 't' | 'r'<<8 | 'u'<<16 | 'e'<<24
	wordNull = 'n' | 'u'<<8 | 'l'<<16 | 'l'<<24
	wordAlse = 'a' | 'l'<<8 | 's'<<16 | 'e'<<24 // false after the f
)

// scan continues the parse of appendJSON from body[i], in state at (never
// atColon), writing to out from n on, for as long as the tokens are common
// ones (strings that need no decoding, small numbers, literals, brackets
// and separators), and returns where it stopped: the new n and i, and the
// state there. It stops before any token it does not take, leaving it
// whole to step, except that it stops after a member name whose colon does
// not follow (atColon). It writes nothing past n+fastRoom before checking
// for room again.
//
// scan is one function of gotos, over the usual size and complexity,
// because a call that returns into it makes the compiler spill its
// registers around the call, which costs more than a common token: with
// the number and string paths as functions it measured 4-8% slower on the
// refund body of BenchmarkFingerprint (docs/fingerprint.md). Its only call
// sorts an object that closes out of order.
func (e *Encoder) scan(out []byte, n int, body []byte, i int, at scanState) (int, int, scanState) {
	body = body[:len(body):len(body)] // so that one register holds both
	out = out[:len(out):len(out)]
	switch at {
	case atName:
		goto name
	case atAfter:
		goto after
	}

value:
	if i >= len(body) || len(out)-n < fastRoom {
		return n, i, atValue
	}
	switch c := body[i]; c {
	case '"':
		at = atValue
		goto text
	case '[', '{':
		// Empty containers, and a full stack, are left to step. The
		// tags are the brackets, and each closer is its opener plus 2.
		j := skipSpace(body, i+1)
		if len(e.stack) >= e.maxDepth || len(e.stack) == cap(e.stack) || j < len(body) && body[j] == c+2 {
			return n, i, atValue
		}
		out[n] = c
		n++
		i = j
		if c == '[' {
			e.push(-1)
			goto value
		}
		e.push(len(e.members))
		goto name
	case 't', 'n', 'f':
		tag, size := literal(body, i)
		if size == 0 {
			return n, i, atValue
		}
		out[n] = tag
		n++
		i += size
	default:
		// A number: zero, or an integer or decimal fraction of at most 16
		// digits in each part and 31 in all, without an exponent, whose
		// last digit is not a zero. Those need no arithmetic: the digits
		// are copied, the fraction's over the excess of the integer
		// part's words, and the exponent is minus the fraction's length.
		tag := byte(tagShortPositive)
		j := i
		if c == '-' {
			tag = tagShortNegative
			j++
		}
		end := skipDigits(body, j)
		d := end - j // digits of the integer part
		if d == 0 || d > 16 || body[j] == '0' && d > 1 {
			return n, i, atValue
		}
		next := byteAt(body, end)
		if body[j] == '0' {
			if next == '.' || next|0x20 == 'e' {
				return n, i, atValue
			}
			out[n] = tagZero
			n++
			i = end
			goto after
		}
		dst := (*[34]byte)(out[n : n+34])
		copyDigits((*[16]byte)(dst[1:17]), body, j, d)
		exp := byte(0) // the zigzag varint of the exponent: one byte
		if next == '.' {
			f := end + 1 // the start of the fraction
			end = skipDigits(body, f)
			if end == f || end-f > 16 {
				return n, i, atValue
			}
			copyDigits((*[16]byte)(dst[1+d:17+d]), body, f, end-f)
			exp = byte(2*(end-f) - 1) // zigzag of -(end-f)
			d += end - f
			next = byteAt(body, end)
		}
		if next|0x20 == 'e' || body[end-1] == '0' || d > maxShort {
			return n, i, atValue
		}
		dst[0] = tag | byte(d)
		dst[1+d] = exp
		n += 2 + d
		i = end
	}
	goto after

name:
	if i >= len(body) || len(out)-n < fastRoom || body[i] != '"' || len(e.members) == cap(e.members) {
		return n, i, atName
	}
	at = atName

text:
	// A string, plain ASCII text of up to 31 bytes (the most a one-byte
	// tag holds): the closing quote is found in registers, 16 bytes at a
	// time, and the text copied in words whatever its length. at says
	// whether it is a value or a member name.
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
		if m := specialBytes(w0); m != 0 {
			k = bits.TrailingZeros64(m) >> 3
		} else if m := specialBytes(w1); m != 0 {
			k = 8 + bits.TrailingZeros64(m)>>3
		} else {
			if i+33 > len(body) {
				return n, i, at
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
				return n, i, at
			}
		}
		if text[k&15] != '"' {
			return n, i, at
		}
		dst[0] = tagShortString | byte(k)
		if at == atValue {
			n += 1 + k
			i += 2 + k
			goto after
		}
		e.addShortName(n, k, i, w0)
		n += 1 + k
		i += 2 + k
	}
	if i = skipSpace(body, i); i >= len(body) || body[i] != ':' {
		return n, i, atColon
	}
	i = skipSpace(body, i+1)
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
		if e.top == noContainer {
			return n, i, atAfter
		}
		i = skipSpace(body, i+1)
		if e.top < 0 {
			goto value
		}
		goto name
	case ']':
		if e.top != -1 || n == len(out) {
			return n, i, atAfter
		}
		out[n] = tagArrayEnd
	case '}':
		// Members whose prefixes rise are in order and distinct. Others
		// are sorted by sortMembers: it reorders out in place, and on a
		// duplicate it leaves out alone for step to report. (A function
		// for this would not inline, and its call costs 2%.)
		if e.top < 0 || len(out)-n < 16 {
			return n, i, atAfter
		}
		ms := e.members[e.top:]
		if !risingPrefixes(ms) && e.sortMembers(out[:n], ms) != nil {
			return n, i, atAfter
		}
		e.members = e.members[:e.top]
		out[n] = tagObjectEnd
	default:
		return n, i, atAfter
	}
	n++
	i++
	e.pop()
	goto after
}

// addShortName records the member whose name scan just wrote at out[n:],
// a text of k < 32 bytes at body[i] that starts with the bytes of w0. The
// sort prefix (see member) comes from the word in hand: loading it back
// from out right after the store would stall on store forwarding. (The
// shift is 64 or more, and the mask all ones, for k >= 8.) There must be
// room for the member within the capacity of e.members.
func (e *Encoder) addShortName(n, k, i int, w0 uint64) {
	ms := e.members[:len(e.members)+1]
	ms[len(ms)-1] = member{
		key: n, val: n + 1 + k, at: i,
		pfx: uint64(tagShortString|k)<<56 | bits.ReverseBytes64(w0&(1<<(8*uint(k))-1))>>8,
	}
	e.members = ms
}

// literal returns the tag and length of the literal true, false or null at
// body[i], or a zero length when there is none.
func literal(body []byte, i int) (byte, int) {
	if i+4 > len(body) {
		return 0, 0
	}
	switch w := binary.LittleEndian.Uint32(body[i : i+4]); {
	case w == wordTrue:
		return tagTrue, 4
	case w == wordNull:
		return tagNull, 4
	case body[i] == 'f' && i+5 <= len(body) && binary.LittleEndian.Uint32(body[i+1:i+5]) == wordAlse:
		return tagFalse, 5
	}
	return 0, 0
}
