package idem

import (
	"context"
	"time"

	"github.com/idemkit/idem/backend"
)

// Record is the stored state of one (scope, key): its state, saved result,
// fencing token, times and story. A Resolver reads one; the command line
// and idemadmin show them.
type Record = backend.Record

// Result is what an effect produced and what a repeat gets back.
type Result = backend.Result

// State is where a record stands in its life: in progress, done or
// released (a released record is absent for the contract).
type State = backend.State

// The states a stored record can be in, and the durabilities.
const (
	StateInProgress = backend.StateInProgress
	StateDone       = backend.StateDone
	StateReleased   = backend.StateReleased

	Durable = backend.Durable
	Fast    = backend.Fast
)

// The words of a record's story, chosen here once for every backend: the
// Store passes them down in Completion.Ending and Releasing.Ending.
const (
	outcomeCompleted = "completed"
	outcomeRecovered = "recovered: " // + Completion.Recovered
	outcomeReleased  = "released"
)

// completion is how the Store ends a claim as done: by its holder
// (recovered empty) or by recovery, which says how it decided.
func completion(res Result, at, expires time.Time, recovered string) backend.Completion {
	outcome := outcomeCompleted
	if recovered != "" {
		outcome = outcomeRecovered + recovered
	}
	return backend.Completion{Result: res, At: at, ExpiresAt: expires, Recovered: recovered,
		Ending: backend.Ending{At: at, Outcome: outcome, Status: res.Status}}
}

// releasing is how the Store ends a claim as released, for reason.
func releasing(at, expires time.Time, reason string) backend.Releasing {
	return backend.Releasing{At: at, ExpiresAt: expires, Reason: reason,
		Ending: backend.Ending{At: at, Outcome: outcomeReleased, Reason: reason}}
}

// Durability says when a write counts as done: Durable (the default)
// syncs every commit to the disk before it is acknowledged; Fast only
// survives a crash of the process (backend.Durability has the detail).
type Durability = backend.Durability

// seal returns res as the backend stores it for (scope, key, fp): sealed
// under the active key of Options.Keys, or as it is without a keyring.
// Every path that hands a Result to the backend goes through it. The
// first one writes the store's encryption marker first (encrypted.go).
func (s *Store) seal(ctx context.Context, scope, key, fp string, res Result) (Result, error) {
	if s.o.Keys == nil {
		return res, nil
	}
	if err := s.markEncrypted(ctx); err != nil {
		return res, err
	}
	return s.o.Keys.Seal(res, scope, key, fp)
}

// open replaces rec's result, if sealed, with the result it seals; a key
// missing from the ring or a ciphertext that does not open leaves rec as
// it is and returns the error. Every path that hands a stored Result to a
// caller goes through it.
func (s *Store) open(scope, key string, rec *Record) error {
	if rec == nil || rec.Result == nil {
		return nil
	}
	res, err := s.o.Keys.Open(rec.Result, scope, key, rec.Fingerprint)
	if err != nil {
		return err
	}
	rec.Result = res
	return nil
}
