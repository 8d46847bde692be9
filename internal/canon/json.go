package canon

import "slices"

// JSON is canonicalized in one pass over the bytes that validates, decodes
// and appends the canonical encoding to a reused buffer, with an explicit
// stack instead of recursion so that depth costs heap, not goroutine stack.
// Objects are canonicalized when they close: their members already sit in
// the buffer, and are reordered in place by their encoded names. Why no
// library does this, and what the speed is measured against: see
// docs/fingerprint.md.
//
// The work is split between scan (scan.go), which takes the common tokens
// as fast as it can, and step, which takes one token in full generality
// wherever scan stops and then hands back. Both produce the same bytes and
// the same errors for any token; scan is only faster.
// fuzz/fingerprint_ref_test.go keeps the plainer implementation this one
// replaced, and FuzzFingerprint checks that the two agree byte for byte.

// fastRoom is the free space scan needs at the end of its buffer before
// each token, so that it writes by index without growth checks of its own:
// its largest write is a tag and 32 bytes of string text, or a tag, 32
// bytes of digits and an exponent byte. It also covers the 16 bytes that
// permute may read past the end.
const fastRoom = 64

// noContainer is the innermost container of a top-level value: see stack.
const noContainer = -2

// Initial capacities of Encoder.stack and Encoder.members, which scan
// fills without growing them.
const (
	minStack   = 64
	minMembers = 32
)

// A scanState says where in the grammar a JSON parse stands: at the start
// of a value, at the start of a member name, after a member name (at its
// colon), after a value, or past the end of the top-level value.
type scanState uint8

const (
	atValue scanState = iota
	atName
	atColon
	atAfter
	atEnd
)

// appendJSON appends the canonical value of the JSON text body to b.
func (e *Encoder) appendJSON(b, body []byte, maxDepth int) ([]byte, error) {
	e.reset(maxDepth)
	// The canonical form of a typical body is shorter than the body, so
	// one size usually serves the whole call.
	b = slices.Grow(b, len(body)+fastRoom)
	i := skipSpace(body, 0)
	at := atValue
	for {
		var n int
		n, i, at = e.scan(b[:cap(b)], len(b), body, i, at)
		b = b[:n]
		if cap(b)-n < fastRoom {
			b = slices.Grow(b, max(n, fastRoom))
		}
		var err error
		if b, i, at, err = e.step(b, body, i, at); err != nil || at == atEnd {
			return b, err
		}
	}
}

// reset readies e's nesting stack and member list for a new body: only
// containers and member names touch them.
func (e *Encoder) reset(maxDepth int) {
	e.stack, e.members, e.maxDepth = e.stack[:0], e.members[:0], maxDepth
	if cap(e.stack) < minStack {
		e.stack = make([]int, 0, minStack)
	}
	if cap(e.members) < minMembers {
		e.members = make([]member, 0, minMembers)
	}
	if cap(e.order) < maxSmallObject {
		e.order = make([]int, 0, maxSmallObject)
	}
	e.top = noContainer
}

// step takes one token from body[i] in state at and returns the state
// after it. b has fastRoom bytes of capacity to spare.
func (e *Encoder) step(b, body []byte, i int, at scanState) ([]byte, int, scanState, error) {
	switch at {
	case atValue:
		return e.value(b, body, i)
	case atName:
		return e.name(b, body, i)
	case atColon:
		// scan took a member name and stopped before its colon.
		i, err := colon(body, i)
		return b, i, atValue, err
	}
	return e.after(b, body, i)
}

// value takes the value that starts at body[i].
func (e *Encoder) value(b, body []byte, i int) ([]byte, int, scanState, error) {
	if i >= len(body) {
		return b, i, atValue, errEnd(i)
	}
	var err error
	switch c := body[i]; c {
	case '"':
		b, i, err = appendString(b, body, i)
	case '[', '{':
		if len(e.stack) >= e.maxDepth {
			return b, i, atValue, errTooDeep(e.maxDepth, i)
		}
		e.stack = slices.Grow(e.stack, 1)
		var n int
		var at scanState
		n, i, at = e.open(b[:cap(b)], len(b), body, i)
		return b[:n], i, at, nil
	case 't', 'f', 'n':
		b, i, err = appendLiteral(b, body, i)
	default:
		b, i, err = appendNumber(b, body, i)
	}
	return b, i, atAfter, err
}

// appendLiteral appends the literal true, false or null at body[i].
func appendLiteral(b, body []byte, i int) ([]byte, int, error) {
	word, tag := "null", byte(tagNull)
	if body[i] == 't' {
		word, tag = "true", tagTrue
	} else if body[i] == 'f' {
		word, tag = "false", tagFalse
	}
	if len(body)-i < len(word) || string(body[i:i+len(word)]) != word {
		return b, i, invalid("bad literal at offset %d", i)
	}
	return append(b, tag), i + len(word), nil
}

// open takes the bracket or brace at body[i], writing to out from n on, and
// returns the new n and i and what comes next. The stack must have room
// for one more entry, and out for two bytes.
func (e *Encoder) open(out []byte, n int, body []byte, i int) (int, int, scanState) {
	c := body[i]
	i = skipSpace(body, i+1)
	if c == '[' {
		out[n] = tagArray
		n++
		if i < len(body) && body[i] == ']' {
			out[n] = tagArrayEnd
			return n + 1, i + 1, atAfter
		}
		e.push(-1)
		return n, i, atValue
	}
	out[n] = tagObject
	n++
	if i < len(body) && body[i] == '}' {
		out[n] = tagObjectEnd
		return n + 1, i + 1, atAfter
	}
	e.push(len(e.members))
	return n, i, atName
}

// push opens a container whose stack entry is top (see Encoder.stack),
// within the stack's capacity.
func (e *Encoder) push(top int) {
	e.top = top
	e.stack = e.stack[:len(e.stack)+1]
	e.stack[len(e.stack)-1] = top
}

// pop closes the innermost container.
func (e *Encoder) pop() {
	e.stack = e.stack[:len(e.stack)-1]
	e.top = noContainer
	if len(e.stack) > 0 {
		e.top = e.stack[len(e.stack)-1]
	}
}

// name takes the member name that starts at body[i], and its colon.
func (e *Encoder) name(b, body []byte, i int) ([]byte, int, scanState, error) {
	if i >= len(body) {
		return b, i, atName, errEnd(i)
	}
	if body[i] != '"' {
		return b, i, atName, invalid("expected a member name at offset %d", i)
	}
	open, key := i, len(b)
	var err error
	if b, i, err = appendString(b, body, i); err != nil {
		return b, i, atName, err
	}
	e.members = addMember(e.members, key, len(b), open, namePrefix(b[key:]))
	i, err = colon(body, i)
	return b, i, atValue, err
}

// colon skips the colon after a member name, and the space around it, from
// body[i] on.
func colon(body []byte, i int) (int, error) {
	i = skipSpace(body, i)
	if i >= len(body) {
		return i, errEnd(i)
	}
	if body[i] != ':' {
		return i, invalid("expected ':' at offset %d", i)
	}
	return skipSpace(body, i+1), nil
}

// after takes what follows a value: a separator, the end of a container,
// or the end of the body.
func (e *Encoder) after(b, body []byte, i int) ([]byte, int, scanState, error) {
	i = skipSpace(body, i)
	if e.top == noContainer {
		if i != len(body) {
			return b, i, atAfter, invalid("data after the value at offset %d", i)
		}
		return b, i, atEnd, nil
	}
	if i >= len(body) {
		return b, i, atAfter, errEnd(i)
	}
	switch c := body[i]; {
	case c == ',':
		if e.top >= 0 {
			return b, skipSpace(body, i+1), atName, nil
		}
		return b, skipSpace(body, i+1), atValue, nil
	case c == ']' && e.top < 0:
		b = append(b, tagArrayEnd)
	case c == '}' && e.top >= 0:
		if err := e.sortMembers(b, e.members[e.top:]); err != nil {
			return b, i, atAfter, err
		}
		e.members = e.members[:e.top]
		b = append(b, tagObjectEnd)
	default:
		return b, i, atAfter, errUnexpected(body, i)
	}
	e.pop()
	return b, i + 1, atAfter, nil
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
