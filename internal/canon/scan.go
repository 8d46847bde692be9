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

// scan continues the parse of appendJSON from body[i], in state at, writing
// to out from n on, for as long as the tokens are common ones (strings that
// need no decoding, small numbers, literals, brackets and separators), and
// returns where it stopped: the new n and i, and the state there. It stops
// before any token it does not take, leaving it whole to step, except that
// it stops after a member name whose colon does not follow (atColon). It
// writes nothing past n+fastRoom before checking for room again.
//
// scan is one loop of gotos rather than a function per state because each
// call that returns into the loop makes the compiler spill its registers,
// which on the common tokens costs more than the token: see
// docs/fingerprint.md. The calls it keeps are for the longer tokens.
func (e *Encoder) scan(out []byte, n int, body []byte, i int, at scanState) (int, int, scanState) {
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
		k, _ := shortString((*[33]byte)(out[n:n+33]), body, i)
		if k < 0 {
			return n, i, atValue
		}
		n += 1 + k
		i += 2 + k
	case '[', '{':
		if len(e.stack) >= e.maxDepth || len(e.stack) == cap(e.stack) {
			return n, i, atValue
		}
		switch n, i, at = e.open(out, n, body, i); at {
		case atName:
			goto name
		case atValue:
			goto value
		}
	case 't', 'n', 'f':
		tag, size := literal(body, i)
		if size == 0 {
			return n, i, atValue
		}
		out[n] = tag
		n++
		i += size
	default:
		size, end := shortNumber((*[34]byte)(out[n:n+34]), body, i)
		if size == 0 {
			return n, i, atValue
		}
		n += size
		i = end
	}
	goto after

name:
	// As for a value string above, and the name's member recorded.
	if i >= len(body) || len(out)-n < fastRoom || body[i] != '"' || len(e.members) == cap(e.members) {
		return n, i, atName
	}
	{
		k, w0 := shortString((*[33]byte)(out[n:n+33]), body, i)
		if k < 0 {
			return n, i, atName
		}
		// The sort prefix (see member), from the words in hand: loading
		// it back from out right after the store would stall on store
		// forwarding. The shift is 64 or more, and the mask all ones,
		// for names of eight bytes or more.
		ms := e.members[:len(e.members)+1] // within capacity
		ms[len(ms)-1] = member{
			key: n, val: n + 1 + k, at: i,
			pfx: uint64(tagShortString|k)<<56 | bits.ReverseBytes64(w0&(1<<(8*uint(k))-1))>>8,
		}
		e.members = ms
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
		// duplicate it leaves out alone for step to report.
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
