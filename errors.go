package idem

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/keyring"
)

// The errors of idem's calls. Those of Begin and Do come first: each maps
// to one row of the contract table, and idemhttp turns them into HTTP
// statuses.
var (
	// ErrInvalidKey is returned when a key is empty, longer than 255
	// bytes or holds a byte outside printable ASCII, or when a scope is
	// malformed or starts with "idem." (reserved for idem's own records).
	ErrInvalidKey = backend.ErrInvalidKey

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

	// ErrUnavailable is returned when the storage cannot be read or
	// written; the effect did not run and a retry is safe.
	ErrUnavailable = backend.ErrUnavailable

	// ErrClosed is returned by every call on a closed or closing Store.
	ErrClosed = backend.ErrClosed

	// ErrCorrupt is returned when a stored record cannot be read back: it
	// is damaged, or written by a newer release. The key is refused, never
	// run again, until an operator acts (idem verify, idem settle).
	ErrCorrupt = backend.ErrCorrupt

	// ErrMissingKey is returned when a record's result is sealed under a
	// key that Options.Keys does not hold; the concrete error is a
	// *MissingKeyError. The record is kept as it is, never replayed as
	// something else and never run again, until the store gets the key.
	ErrMissingKey = keyring.ErrMissingKey

	// ErrNotFound is returned by Store.Get and Settle for a key with no
	// record.
	ErrNotFound = backend.ErrNotFound

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

	// Errors returned by Claim.Complete, Claim.Release, Claim.Extend and
	// Claim.Hold.

	// ErrFenced is returned when the claim's token is no longer the current
	// one for its key: the claim was recovered, released or taken over, and
	// the call changed nothing. The concrete error is a *FencedError.
	ErrFenced = backend.ErrFenced

	// ErrClaimDone is returned when a claim that this process already
	// completed, released or held is used again.
	ErrClaimDone = errors.New("idem: claim already finished")

	// Errors of the Store's other calls.

	// ErrNoBackup is returned by Store.Backup when the backend cannot back
	// itself up (it does not implement backend.Backuper). A PostgreSQL store
	// (pgstore) is backed up with PostgreSQL's own tools (pg_dump, or base
	// backups with WAL archiving), which see its tables as they commit.
	ErrNoBackup = errors.New("idem: the backend does not back itself up")

	// ErrNoClaim is returned by ExecFenced and DownstreamKey when ctx
	// carries no claim: they run only inside an effect that Do or DoTx runs.
	ErrNoClaim = errors.New("idem: no claim in the context (ExecFenced and DownstreamKey run inside an effect)")

	// ErrInvalidOptions is returned by Options.Validate and Open when options
	// make no sense together. The concrete errors are *OptionsError values,
	// joined, one per field at fault.
	ErrInvalidOptions = errors.New("idem: invalid options")

	// ErrNothingToSettle is returned by Settle when the key holds no claim
	// whose lease ended: nothing is stored, the record is done or released, or
	// its claim is live (then the error is also an *InProgressError).
	ErrNothingToSettle = errors.New("idem: no stale claim to settle")

	// ErrKeysNeeded is returned by Settle when a committed verdict would
	// store its result in clear in an encrypted store: the Store has no
	// keyring (Options.Keys) and the settle does not say the result may be
	// stored in clear (SettleOptions.InClear). The concrete error is a
	// *KeysNeededError.
	ErrKeysNeeded = errors.New("idem: the store is encrypted: settling needs its active key")

	// ErrNoVerify is returned by Store.Verify when the backend cannot verify
	// what it stores (it does not implement backend.Verifier).
	ErrNoVerify = errors.New("idem: the backend does not verify its storage")

	// ErrNoRekey is returned by Store.Rekey when the store has no keyring
	// (Options.Keys), or its backend cannot list and reseal records
	// (backend.Lister, backend.Resealer).
	ErrNoRekey = errors.New("idem: rekey needs Options.Keys and a backend that lists and reseals records")

	// ErrNoTx is returned by DoTx when the store's backend does not run
	// effects in transactions of the effect's type.
	ErrNoTx = errors.New("idem: the backend does not run effects in such a transaction")

	// Errors returned when a payload cannot be fingerprinted.

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
type FencedError = backend.FencedError

// SavedError is what Do returns, beside the saved Result, when the first
// attempt's error was saved by the error policy and is being replayed.
type SavedError struct {
	// Message is the text of the first attempt's error.
	Message string
}

func (e *SavedError) Error() string { return e.Message }

// DefaultErrorText is the default Options.ErrorText: the text of the idem
// sentinel err matches, or of context.Canceled or DeadlineExceeded, and
// otherwise the word "error". It never returns text err's author chose.
func DefaultErrorText(err error) string {
	for _, known := range []error{context.Canceled, context.DeadlineExceeded, ErrUnavailable, ErrClosed,
		ErrRanTwice, ErrOutcomeNotRecorded, ErrFenced, ErrClaimDone, ErrInProgress, ErrMismatch, ErrOutcomeUnknown,
		ErrInvalidKey, ErrCorrupt, ErrMissingKey, ErrNotFound} {
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

// OptionsError names an Options field, or a pair of them, that makes no
// sense.
type OptionsError struct {
	// Field names the field, e.g. "Retention" or "Badger.Durability".
	Field string
	// Reason says what is wrong with it.
	Reason string
}

func (e *OptionsError) Error() string { return "idem: Options." + e.Field + ": " + e.Reason }

// Is reports whether target is ErrInvalidOptions.
func (e *OptionsError) Is(target error) bool { return target == ErrInvalidOptions }

// LateCompletionError is what Do returns, beside fn's result, when the
// effect ran and its outcome was to be saved, but its claim had been
// recovered first (Complete was fenced: its holder was paused, or cut off
// from the storage, past the lease and the grace), and the late outcome
// could not be recorded either: the backend is no LateCompleter, or
// recording it failed on storage. The effect happened; the record does
// not hold its result, so the key may be run again, or may already have
// been, by another holder: treat the outcome as unrecorded, and do not
// report success to a client that will retry. It matches
// ErrOutcomeNotRecorded, and ErrFenced.
type LateCompletionError struct {
	Scope, Key string
	// Token is the late holder's token.
	Token uint64
	// Err holds the fenced completion's error, the late write's error if
	// any, and fn's own error, if any.
	Err error
}

func (e *LateCompletionError) Error() string {
	return fmt.Sprintf("idem: effect for key %q in scope %q ran, but its claim (token %d) was recovered before its result was saved",
		e.Key, e.Scope, e.Token)
}

// Unwrap returns Err.
func (e *LateCompletionError) Unwrap() error { return e.Err }

// Is reports whether target is ErrOutcomeNotRecorded: the effect ran and
// its outcome is not recorded. (ErrFenced matches through Err.)
func (e *LateCompletionError) Is(target error) bool { return target == ErrOutcomeNotRecorded }

// RanTwiceError is what Do returns, beside fn's result, when the effect
// ran but its claim had been recovered and the key claimed again by
// another holder before its result was saved: the effect may have run
// twice. The newer holder's outcome is the record's (its result is what a
// repeat gets), this one is not recorded, and the record is marked
// MayHaveRunTwice, with this attempt in its story. It matches ErrRanTwice
// and ErrOutcomeNotRecorded, and ErrFenced through Err.
type RanTwiceError struct {
	Scope, Key string
	// Token is the late holder's token.
	Token uint64
	// Err holds the fenced completion's error and fn's own error, if any.
	Err error
}

func (e *RanTwiceError) Error() string {
	return fmt.Sprintf("idem: effect for key %q in scope %q may have run twice: its claim (token %d) was recovered and the key claimed again before its result was saved",
		e.Key, e.Scope, e.Token)
}

// Unwrap returns Err.
func (e *RanTwiceError) Unwrap() error { return e.Err }

// Is reports whether target is ErrRanTwice or ErrOutcomeNotRecorded.
func (e *RanTwiceError) Is(target error) bool {
	return target == ErrRanTwice || target == ErrOutcomeNotRecorded
}

// MissingKeyError is returned when a record's result is sealed under a key
// Options.Keys does not hold; it matches ErrMissingKey.
type MissingKeyError = keyring.MissingKeyError

// KeysNeededError is returned by Settle when a committed verdict would
// store its result in clear in an encrypted store (docs/encryption.md says
// how a store knows it is encrypted); it matches ErrKeysNeeded. Nothing is
// written.
type KeysNeededError struct {
	Scope, Key string
	// Because says how the store is known to be encrypted: its marker
	// record, or a sealed result found in it.
	Because string
}

func (e *KeysNeededError) Error() string {
	return fmt.Sprintf("idem: settle key %q in scope %q: the store is encrypted (%s), and this settle has no key "+
		"to seal the result with: give the store's active key (the command line's -keys or $IDEM_KEYS; "+
		"Options.Keys), or say that this result may be stored in clear (idem resolve -in-clear; "+
		"idemadmin's in_clear; SettleOptions.InClear)", e.Key, e.Scope, e.Because)
}

// Is reports whether target is ErrKeysNeeded.
func (e *KeysNeededError) Is(target error) bool { return target == ErrKeysNeeded }
