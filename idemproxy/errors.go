package idemproxy

import "errors"

// ErrInvalidOptions is returned by New and ParseScope when the
// configuration makes no sense; the error's text names what.
var ErrInvalidOptions = errors.New("idemproxy: invalid options")
