package canon

import "fmt"

// Kind says which rule a body broke.
type Kind uint8

// The kinds of Error.
const (
	// Invalid is malformed JSON: bad syntax, invalid UTF-8, a raw control
	// character in a string, trailing data, or a number outside the JSON
	// grammar or with an exponent of more than 18 digits.
	Invalid Kind = iota + 1
	// Duplicate is an object that names a member twice.
	Duplicate
	// TooDeep is nesting deeper than the bound.
	TooDeep
)

// Error is the error Request returns for a JSON body it rejects.
type Error struct {
	Kind   Kind
	Detail string // what was wrong and the body offset, e.g. "unexpected end at offset 7"
}

func (e *Error) Error() string {
	switch e.Kind {
	case Duplicate:
		return "duplicate member: " + e.Detail
	case TooDeep:
		return "too deep: " + e.Detail
	}
	return "invalid JSON: " + e.Detail
}

func invalid(format string, args ...any) error {
	return &Error{Kind: Invalid, Detail: fmt.Sprintf(format, args...)}
}

func errEnd(i int) error {
	return invalid("unexpected end at offset %d", i)
}

func errUnexpected(body []byte, i int) error {
	return invalid("unexpected %q at offset %d", body[i], i)
}

func errDuplicate(b []byte, x, y *member) error {
	return &Error{Kind: Duplicate, Detail: fmt.Sprintf("%q at offset %d", stringText(b[x.key:x.val]), max(x.at, y.at))}
}

func errTooDeep(maxDepth, i int) error {
	return &Error{Kind: TooDeep, Detail: fmt.Sprintf("more than %d levels at offset %d", maxDepth, i)}
}
