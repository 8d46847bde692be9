package keyring

import (
	"errors"
	"fmt"
)

// ErrMissingKey is returned when a stored result is sealed under a key the
// ring does not hold (or no ring is configured). The concrete error is a
// *MissingKeyError. The record is kept as it is: it is never replayed as
// something else, and its effect never runs again; give the Store a ring
// holding the key to read it.
var ErrMissingKey = errors.New("idem: result sealed under a key not in the keyring")

// MissingKeyError is returned when a result is sealed under a key the ring
// does not hold.
type MissingKeyError struct {
	Scope, Key string
	// KeyID names the missing key.
	KeyID string
}

func (e *MissingKeyError) Error() string {
	return fmt.Sprintf("idem: result of key %q in scope %q is sealed under key %q, not in the keyring",
		e.Key, e.Scope, e.KeyID)
}

// Is reports whether target is ErrMissingKey.
func (e *MissingKeyError) Is(target error) bool { return target == ErrMissingKey }
