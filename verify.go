package idem

import (
	"context"

	"github.com/idemkit/idem/backend"
)

// Verify checks everything the store's backend keeps (every record's
// checksum, the expiry index, Badger's tables, idem's log, for the
// embedded backend) and reports the damage. A damaged record is
// ErrCorrupt to every call that reads it; Verify finds them all at once.
func (s *Store) Verify(ctx context.Context) (*backend.VerifyReport, error) {
	v, ok := s.b.(backend.Verifier)
	if !ok {
		return nil, ErrNoVerify
	}
	var r *backend.VerifyReport
	err := s.call(func() error {
		var err error
		r, err = v.Verify(ctx)
		return err
	})
	return r, err
}
