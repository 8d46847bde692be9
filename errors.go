package idem

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Errors returned by Begin and Do when a request cannot run. Each maps to one
// row of the contract table; idemhttp turns them into HTTP statuses.
var (
	// ErrInvalidKey is returned when a key is empty, longer than MaxKeyLen or
	// holds a byte outside printable ASCII, or when a scope is malformed.
	ErrInvalidKey = errors.New("idem: invalid idempotency key")

	// ErrInProgress is returned when another claim on the key holds a live
	// lease. The concrete error is an *InProgressError carrying the lease end.
	ErrInProgress = errors.New("idem: request in progress")

	// ErrMismatch is returned when a key comes back with a different
	// fingerprint. The concrete error is a *MismatchError.
	ErrMismatch = errors.New("idem: key reused with a different payload")

	// ErrOutcomeUnknown is returned when a claim's lease ended and nobody can
	// tell yet whether its effect happened: no resolver is configured, or the
	// resolver answered VerdictUnknown. The request must not run again until
	// recovery decides. The concrete error is an *OutcomeUnknownError.
	ErrOutcomeUnknown = errors.New("idem: outcome of an earlier attempt is unknown")

	// ErrNeedsAttention is returned when recovery gave up on a claim after
	// Options.MaxUnknown inconclusive checks: an operator must decide. It is
	// wrapped by an *OutcomeUnknownError whose Attention field is true.
	ErrNeedsAttention = errors.New("idem: claim needs attention")

	// ErrUnclean is returned by a read-only open of a store that the last
	// process holding it did not close (it crashed or was killed) and that
	// holds writes only a read-write open applies. Open it for writing
	// once (a server start, or idem sweep), then read it.
	ErrUnclean = errors.New("idem: store not closed cleanly")

	// ErrUnavailable is returned when the storage cannot be read or written;
	// the effect did not run. Backends wrap their own errors with it.
	ErrUnavailable = errors.New("idem: storage unavailable")

	// ErrClosed is returned by every call on a closed or closing Store.
	ErrClosed = errors.New("idem: store closed")

	// ErrOutcomeNotRecorded is returned when the effect ran but its outcome
	// could not be recorded: saving, releasing or holding the claim failed
	// on storage, or the store closed under the running effect once
	// CloseTimeout ran out. Unlike ErrUnavailable and ErrClosed, which mean
	// the effect did not run and a retry is safe, it means the effect may
	// have happened: the claim stays in progress for recovery to resolve.
	// The concrete error is a *NotRecordedError; it never matches
	// ErrUnavailable or ErrClosed.
	ErrOutcomeNotRecorded = errors.New("idem: effect ran but its outcome was not recorded")

	// ErrRanTwice is returned by Do when the effect ran but its claim had
	// been recovered and the key claimed again before its result was
	// saved: the effect may have run twice, and the key's record is
	// marked so (Record.MayHaveRunTwice). It comes with
	// ErrOutcomeNotRecorded; the concrete error is a *RanTwiceError.
	ErrRanTwice = errors.New("idem: effect may have run twice")
)

// Errors returned by Claim.Complete, Claim.Release, Claim.Extend and
// Claim.Hold.
var (
	// ErrFenced is returned when the claim's token is no longer the current
	// one for its key: the claim was recovered, released or taken over, and
	// the call changed nothing. The concrete error is a *FencedError.
	ErrFenced = errors.New("idem: claim no longer current (fenced)")

	// ErrClaimDone is returned when a claim that this process already
	// completed, released or held is used again.
	ErrClaimDone = errors.New("idem: claim already finished")
)

// Errors returned by Backend implementations and by record decoding.
var (
	// ErrNotFound is returned by Backend.Get when no live record exists.
	ErrNotFound = errors.New("idem: record not found")

	// ErrCorrupt is returned when a stored record cannot be decoded, or was
	// written by a newer format version than this release reads.
	ErrCorrupt = errors.New("idem: corrupt record")
)

// Errors returned when a payload cannot be fingerprinted.
var (
	// ErrBodyTooLarge is returned when a body exceeds the fingerprint size bound.
	ErrBodyTooLarge = errors.New("idem: body too large to fingerprint")

	// ErrBodyTooDeep is returned when JSON nesting exceeds the depth bound.
	ErrBodyTooDeep = errors.New("idem: JSON body nested too deeply")

	// ErrDuplicateMember is returned when a JSON object names a member twice.
	ErrDuplicateMember = errors.New("idem: JSON object has a duplicate member name")

	// ErrInvalidJSON is returned when a body declared as JSON does not parse.
	ErrInvalidJSON = errors.New("idem: invalid JSON body")
)

// InProgressError is returned when a live claim holds the key.
type InProgressError struct {
	Scope, Key string
	// LeaseEnds is when the current holder's lease ends unless extended.
	LeaseEnds time.Time
}

func (e *InProgressError) Error() string {
	return fmt.Sprintf("idem: key %q in scope %q in progress (lease ends %s)",
		e.Key, e.Scope, e.LeaseEnds.Format(time.RFC3339Nano))
}

// Is reports whether target is ErrInProgress.
func (e *InProgressError) Is(target error) bool { return target == ErrInProgress }

// RetryAfter returns how long after now a retry is worth making, at least a
// second, as an HTTP Retry-After header needs.
func (e *InProgressError) RetryAfter(now time.Time) time.Duration {
	d := e.LeaseEnds.Sub(now)
	if d < time.Second {
		return time.Second
	}
	return d
}

// MismatchError is returned when a key comes back with another fingerprint.
type MismatchError struct {
	Scope, Key string
	// Stored is the fingerprint saved by the first request; Got is this one.
	Stored, Got string
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("idem: key %q in scope %q reused with a different payload (stored %s, got %s)",
		e.Key, e.Scope, e.Stored, e.Got)
}

// Is reports whether target is ErrMismatch.
func (e *MismatchError) Is(target error) bool { return target == ErrMismatch }

// OutcomeUnknownError is returned when an earlier claim's outcome is not
// known yet.
type OutcomeUnknownError struct {
	Scope, Key string
	// Checks counts the resolver's inconclusive answers so far.
	Checks int
	// Attention is true once recovery gave up and an operator must decide.
	Attention bool
	// NextCheck is when recovery asks the resolver again (zero if never).
	NextCheck time.Time
}

func (e *OutcomeUnknownError) Error() string {
	if e.Attention {
		return fmt.Sprintf("idem: key %q in scope %q needs attention after %d inconclusive checks",
			e.Key, e.Scope, e.Checks)
	}
	return fmt.Sprintf("idem: outcome of key %q in scope %q unknown (%d checks)", e.Key, e.Scope, e.Checks)
}

// Is reports whether target is ErrOutcomeUnknown, or ErrNeedsAttention when
// recovery gave up.
func (e *OutcomeUnknownError) Is(target error) bool {
	return target == ErrOutcomeUnknown || (e.Attention && target == ErrNeedsAttention)
}

// NotRecordedError is returned when an effect ran and its outcome could not
// be recorded. It matches ErrOutcomeNotRecorded only: its causes are in its
// fields, not in its chain, so that errors.Is(err, ErrUnavailable) or
// errors.Is(err, ErrClosed), which mean "did not run", stays false.
type NotRecordedError struct {
	Scope, Key string
	// Cause is why the outcome was not recorded (a storage error, ErrClosed).
	Cause error
	// Err is the effect's own error, nil if it succeeded.
	Err error
}

func (e *NotRecordedError) Error() string {
	msg := fmt.Sprintf("idem: effect for key %q in scope %q ran but its outcome was not recorded: %v",
		e.Key, e.Scope, e.Cause)
	if e.Err != nil {
		msg += " (effect error: " + e.Err.Error() + ")"
	}
	return msg
}

// Is reports whether target is ErrOutcomeNotRecorded.
func (e *NotRecordedError) Is(target error) bool { return target == ErrOutcomeNotRecorded }

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

// SavedError is what Do returns, beside the saved Result, when the first
// attempt's error was saved by the error policy and is being replayed.
type SavedError struct {
	// Message is the text of the first attempt's error.
	Message string
}

func (e *SavedError) Error() string { return e.Message }

// unavailable wraps a storage error so that it matches ErrUnavailable while
// keeping the cause visible to errors.Is and errors.As.
func unavailable(op string, err error) error {
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

// DefaultErrorText is the default Options.ErrorText: the text of the idem
// sentinel err matches, or of context.Canceled or DeadlineExceeded, and
// otherwise the word "error". It never returns text err's author chose.
func DefaultErrorText(err error) string {
	for _, known := range []error{context.Canceled, context.DeadlineExceeded, ErrUnavailable, ErrClosed,
		ErrRanTwice, ErrOutcomeNotRecorded, ErrFenced, ErrClaimDone, ErrInProgress, ErrMismatch, ErrOutcomeUnknown,
		ErrInvalidKey, ErrCorrupt, ErrNotFound} {
		if errors.Is(err, known) {
			return known.Error()
		}
	}
	return "error"
}

// errorText is what the store keeps of an effect's error.
func (s *Store) errorText(err error) string {
	if s.o.ErrorText != nil {
		return s.o.ErrorText(err)
	}
	return DefaultErrorText(err)
}
