// Package canon writes the canonical encoding that idem's fingerprints hash:
// a request's method, route, content-type class and body as bytes that are
// equal exactly when the requests mean the same (see encoding.go for the
// grammar, and docs/fingerprint.md for the design and its measurements).
//
// For JSON bodies, canonical means:
//
//   - member order and insignificant whitespace are ignored; array order and
//     value types are not;
//   - every escape form of a string encodes alike (a lone surrogate escape
//     is kept apart from U+FFFD and from every other string);
//   - numbers compare by exact decimal value, never through float64
//     (1.50, 15e-1 and 1.5 are equal; -0 is 0);
//   - an object that names a member twice, after unescaping, is an error,
//     as is malformed JSON, invalid UTF-8 or trailing data;
//   - nesting deeper than the caller's bound is an error; the caller bounds
//     the body's size, and the encoder never recurses, so depth costs heap.
//
// An Encoder reuses its scratch space, so a warm encoder allocates nothing.
// Errors are *Error values that say which rule failed and where.
package canon
