package backend

import (
	"errors"
	"fmt"
)

// Errors a Backend returns, and the Store passes on to its callers (the
// root package exports each under the same name).
var (
	// ErrNotFound is returned by Backend.Get when no record is stored.
	ErrNotFound = errors.New("idem: record not found")

	// ErrCorrupt is returned when a stored record cannot be decoded, was
	// written by a newer format version than this release reads, or fails
	// a checksum.
	ErrCorrupt = errors.New("idem: corrupt record")

	// ErrUnavailable is returned when the storage cannot be read or written;
	// the effect did not run. Backends wrap their own errors with it
	// (Unavailable).
	ErrUnavailable = errors.New("idem: storage unavailable")

	// ErrClosed is returned by every call on a closed or closing store or
	// backend.
	ErrClosed = errors.New("idem: store closed")

	// ErrFenced is returned when the claim's token is no longer the current
	// one for its key: the claim was recovered, released or taken over, and
	// the call changed nothing. The concrete error is a *FencedError.
	ErrFenced = errors.New("idem: claim no longer current (fenced)")

	// ErrInvalidKey is returned when a key is empty, longer than MaxKeyLen or
	// holds a byte outside printable ASCII, or when a scope is malformed.
	ErrInvalidKey = errors.New("idem: invalid idempotency key")
)

// FencedError is returned when a claim's token is stale.
type FencedError struct {
	Scope, Key string
	// Token is the stale token the caller held.
	Token uint64
}

func (e *FencedError) Error() string {
	return fmt.Sprintf("idem: claim on key %q in scope %q with token %d is no longer current",
		e.Key, e.Scope, e.Token)
}

// Is reports whether target is ErrFenced.
func (e *FencedError) Is(target error) bool { return target == ErrFenced }

// Unavailable wraps a storage error of operation op so that it matches
// ErrUnavailable while keeping the cause visible to errors.Is and
// errors.As. An error that already matches one of this package's errors
// is returned as it is; nil stays nil.
func Unavailable(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrUnavailable) || errors.Is(err, ErrClosed) || errors.Is(err, ErrFenced) ||
		errors.Is(err, ErrNotFound) || errors.Is(err, ErrCorrupt) {
		return err
	}
	return &storageError{op: op, err: err}
}

type storageError struct {
	op  string
	err error
}

func (e *storageError) Error() string {
	return "idem: " + e.op + ": storage unavailable: " + e.err.Error()
}
func (e *storageError) Unwrap() []error { return []error{ErrUnavailable, e.err} }
