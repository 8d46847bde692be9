package idem

import (
	"context"
	"errors"
	"slices"

	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/keyring"
)

// RekeyReport says what Store.Rekey did, record by record.
type RekeyReport struct {
	// Scanned counts the done records holding a result.
	Scanned int `json:"scanned"`
	// Rekeyed counts those sealed again under the active key: under an
	// older key, or in clear (written before encryption was turned on).
	Rekeyed int `json:"rekeyed"`
	// Current counts those already sealed under the active key.
	Current int `json:"current"`
	// Missing counts those sealed under a key the ring does not hold, and
	// MissingKeys names those keys; Corrupt counts those that did not
	// open. Both are left as they are.
	Missing     int      `json:"missing"`
	MissingKeys []string `json:"missing_keys,omitempty"`
	Corrupt     int      `json:"corrupt"`
	// Changed counts those that changed while Rekey ran (expired and
	// claimed again, or reclaimed): their new result, if any, is sealed
	// under the active key when it is written.
	Changed int `json:"changed"`
}

// Rekey seals every done record's result again under the active key of
// Options.Keys: those under older keys, and those written in clear before
// encryption was turned on. It writes the store's encryption marker
// (EncryptionScope) first, if none is stored. Afterwards the older keys can leave the ring.
// Each record is read, opened, sealed and written back with a write fenced
// on its token (backend.Resealer), so a record that changes meanwhile
// keeps its change; a record already under the active key is not
// written. Rekey can therefore be stopped (ctx) and run again: a new run
// does what the last one left. Records whose key is missing or that do not
// open are counted and left as they are. It returns ErrNoRekey without a
// keyring, or on a backend that cannot list and reseal records.
func (s *Store) Rekey(ctx context.Context) (*RekeyReport, error) {
	lister, ok := s.b.(backend.Lister)
	resealer, ok2 := s.b.(backend.Resealer)
	if s.o.Keys == nil || !ok || !ok2 {
		return nil, ErrNoRekey
	}
	if err := s.markEncrypted(ctx); err != nil {
		return nil, err
	}
	r := &RekeyReport{}
	var todo []backend.Ref
	err := s.call(func() error {
		return lister.Scan(ctx, func(rec *Record) bool {
			if rec.State != StateDone || rec.Result == nil || rec.Scope == EncryptionScope {
				// The marker's result is a key id, in clear by design.
				return true
			}
			r.Scanned++
			if id, sealed := keyring.Sealed(rec.Result); sealed && id == s.o.Keys.Active() {
				r.Current++
				return true
			}
			todo = append(todo, backend.Ref{Scope: rec.Scope, Key: rec.Key, Token: rec.Token})
			return true
		})
	})
	if err != nil {
		return r, err
	}
	for _, ref := range todo {
		if err := ctx.Err(); err != nil {
			return r, err
		}
		if err := s.rekeyOne(ctx, resealer, ref, r); err != nil {
			return r, err
		}
	}
	return r, nil
}

// rekeyOne seals the result of ref's record again under the active key,
// and counts what it did in r. It returns only errors that stop Rekey.
func (s *Store) rekeyOne(ctx context.Context, resealer backend.Resealer, ref backend.Ref, r *RekeyReport) error {
	var rec *Record
	err := s.call(func() (err error) {
		rec, err = s.b.Get(ctx, ref.Scope, ref.Key)
		return err
	})
	switch {
	case r.left(err):
		return nil
	case err != nil:
		return err
	case rec.State != StateDone || rec.Token != ref.Token || rec.Result == nil:
		r.Changed++
		return nil
	}
	if id, sealed := keyring.Sealed(rec.Result); sealed && id == s.o.Keys.Active() {
		r.Current++ // a run before this one, or a concurrent one, did it
		return nil
	}
	sealed, err := s.seal(ctx, ref.Scope, ref.Key, rec.Fingerprint, *rec.Result)
	if err == nil {
		err = s.call(func() error { return resealer.Reseal(ctx, ref.Scope, ref.Key, ref.Token, sealed) })
	}
	switch {
	case r.left(err):
	case err != nil:
		return err
	default:
		r.Rekeyed++
	}
	return nil
}

// left counts in r a record that err says Rekey leaves as it is: gone or
// changed (ErrNotFound, ErrFenced), missing its key, or corrupt. It
// reports whether it counted one.
func (r *RekeyReport) left(err error) bool {
	var mk *MissingKeyError
	switch {
	case err == nil:
		return false
	case errors.Is(err, ErrNotFound) || errors.Is(err, ErrFenced):
		r.Changed++
	case errors.As(err, &mk):
		r.Missing++
		if !slices.Contains(r.MissingKeys, mk.KeyID) {
			r.MissingKeys = append(r.MissingKeys, mk.KeyID)
		}
	case errors.Is(err, ErrCorrupt):
		r.Corrupt++
	default:
		return false
	}
	return true
}
