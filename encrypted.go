package idem

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/keyring"
)

// EncryptionScope is the scope of the record that marks a store as
// encrypted: its key is EncryptionMarker. A Store with Options.Keys writes
// it, through the backend's ordinary claim and completion, before the first
// result it seals, so every backend keeps it without a line of its own.
// Its result holds, in clear, the id of the key that sealed that first
// result (key ids are in clear in every sealed result anyway). Settle reads
// it to refuse storing a result in clear (docs/encryption.md).
const EncryptionScope = "idem.encryption"

// EncryptionMarker is the key of the record in EncryptionScope.
const EncryptionMarker = "marker"

// markerFingerprint is the marker record's fingerprint: it marks, it
// fingerprints nothing.
const markerFingerprint = "idem-encryption-marker"

// markerKeep is how long the marker record is kept: as long as the store.
// (Backends hold expiry times as Unix nanoseconds, which end in 2262.)
const markerKeep = 100 * 365 * 24 * time.Hour

// markerRule is how recovery ends a marker claim whose writer died before
// it completed: released, and kept as long as a completed marker, which
// says as much (a released marker still marks the store).
func markerRule() recoveryRule {
	return recoveryRule{verdict: VerdictNotCommitted, why: "encryption marker kept", keep: markerKeep}
}

// markEncrypted writes the marker record once per Store, if it has a
// keyring, before the first result it seals. A marker already stored, in
// any state, is enough.
func (s *Store) markEncrypted(ctx context.Context) error {
	if s.o.Keys == nil || s.marked.Load() {
		return nil
	}
	s.marking.Lock()
	defer s.marking.Unlock()
	if s.marked.Load() {
		return nil
	}
	now := s.now()
	err := s.call(func() error {
		rec, claimed, err := s.b.Claim(ctx, EncryptionScope, EncryptionMarker, backend.ClaimArgs{
			Fingerprint: markerFingerprint, Now: now, LeaseEnds: now.Add(s.o.Lease), Retention: markerKeep, Owner: s.owner})
		if err != nil || !claimed {
			// Stored already: done, released or claimed by another writer.
			return err
		}
		res := Result{Body: []byte(s.o.Keys.Active())}
		return s.b.Complete(ctx, EncryptionScope, EncryptionMarker, rec.Token,
			completion(res, now, now.Add(markerKeep), ""))
	})
	if err != nil {
		s.observeErr("mark encrypted", EncryptionScope, EncryptionMarker, 0, err)
		return err
	}
	s.marked.Store(true)
	return nil
}

// encrypted reports whether the store is encrypted, and how it knows: its
// marker record is stored, or, for a store whose results were sealed
// before the marker existed, one of its results is sealed (a scan that
// stops at the first one, on a backend that lists records).
func (s *Store) encrypted(ctx context.Context) (bool, string, error) {
	var rec *Record
	err := s.call(func() (err error) {
		rec, err = s.b.Get(ctx, EncryptionScope, EncryptionMarker)
		return err
	})
	switch {
	case err == nil:
		because := fmt.Sprintf("its record %s/%s says it was opened with keys", EncryptionScope, EncryptionMarker)
		if rec.Result != nil && len(rec.Result.Body) > 0 {
			because += fmt.Sprintf(", first key %q", rec.Result.Body)
		}
		return true, because, nil
	case !errors.Is(err, ErrNotFound):
		return false, "", err
	}
	l, ok := s.b.(backend.Lister)
	if !ok {
		return false, "", nil
	}
	var because string
	err = s.call(func() error {
		return l.Scan(ctx, func(rec *Record) bool {
			if id, sealed := keyring.Sealed(rec.Result); sealed {
				because = fmt.Sprintf("it holds results sealed under key %q, such as key %q in scope %q", id, rec.Key, rec.Scope)
				return false
			}
			return true
		})
	})
	return because != "", because, err
}
