package badgerstore

import (
	"context"
	"fmt"

	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/internal/badger"
)

var _ backend.Verifier = (*Backend)(nil)

// Verify implements Verifier: every table block against its checksum,
// idem's log, every record (its checksum, and that it is the record of
// the key it is stored under) and every expiry index entry.
func (b *Backend) Verify(ctx context.Context) (*backend.VerifyReport, error) {
	r := &backend.VerifyReport{}
	if err := b.eng.VerifyTables(); err != nil {
		r.Damage = append(r.Damage, backend.Damage{Part: "tables", Problem: err.Error()})
	}
	if err := b.eng.VerifyLog(); err != nil {
		r.Damage = append(r.Damage, backend.Damage{Part: "log", Problem: err.Error()})
	}
	err := b.eng.View(func(txn *badger.Txn) error {
		if err := b.verifyRecords(ctx, txn, r); err != nil {
			return err
		}
		return b.verifyExpiries(ctx, txn, r)
	})
	if err != nil {
		return nil, backend.Unavailable("verify", err)
	}
	return r, nil
}

func (b *Backend) verifyRecords(ctx context.Context, txn *badger.Txn, r *backend.VerifyReport) error {
	it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixRecord}, PrefetchValues: true, PrefetchSize: 64})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		r.Records++
		id := it.Item().Key()[1:]
		scope, key := splitRecordID(id)
		var rec *backend.Record
		err := it.Item().Value(func(v []byte) error {
			var err error
			rec, err = backend.DecodeRecord(v)
			return err
		})
		switch {
		case err != nil:
			r.Damage = append(r.Damage, backend.Damage{Part: "record", Scope: scope, Key: key, Problem: err.Error()})
		case rec.Scope != scope || rec.Key != key:
			r.Damage = append(r.Damage, backend.Damage{Part: "record", Scope: scope, Key: key,
				Problem: fmt.Sprintf("holds the record of scope %q, key %q", rec.Scope, rec.Key)})
		}
	}
	return nil
}

// verifyExpiries checks that every expiry index entry has a time and an
// id. An entry whose record is gone is not damage: reclaiming removes
// the record first and the entry with it, but an entry may outlive a
// record a later write moved.
func (b *Backend) verifyExpiries(ctx context.Context, txn *badger.Txn, r *backend.VerifyReport) error {
	it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixExpiry}})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		r.Expiries++
		k := it.Item().Key()
		if len(k) < 10 {
			r.Damage = append(r.Damage, backend.Damage{Part: "expiry index", Problem: fmt.Sprintf("an entry of %d bytes, too short for a time and an id", len(k))})
			continue
		}
		if id := k[9:]; 1+int(id[0]) > len(id) {
			r.Damage = append(r.Damage, backend.Damage{Part: "expiry index", Problem: "an entry whose id is malformed"})
		}
	}
	return nil
}
