package idem_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/keyring"
)

// ExampleStore_Rekey encrypts saved results (Options.Keys), rotates to a
// new key, and seals the results of the old key again under the new one,
// after which the old key can leave the ring.
func ExampleStore_Rekey() {
	dir, _ := os.MkdirTemp("", "idem-rekey")
	defer os.RemoveAll(dir)
	// Real keys are 32 random bytes from a secret store or a KMS
	// (keyring.Fetch).
	old := keyring.Key{ID: "2026-12", Secret: bytes.Repeat([]byte{1}, keyring.KeySize)}
	next := keyring.Key{ID: "2027-01", Secret: bytes.Repeat([]byte{2}, keyring.KeySize)}
	ctx := context.Background()
	req := idem.Request{Scope: "tenant-42", Key: "refund:order-123", Fingerprint: "fp"}

	ring, _ := keyring.New(old)
	store, err := idem.Open(dir, &idem.Options{Keys: ring})
	if err != nil {
		log.Fatal(err)
	}
	_, _, _ = store.Do(ctx, req, func(context.Context) (idem.Result, error) {
		return idem.Result{Status: 201, Body: []byte(`{"iban":"DE89370400440532013000"}`)}, nil
	})
	store.Close()

	rotated, _ := keyring.New(next, old) // new results under 2027-01; 2026-12 still read
	store, err = idem.Open(dir, &idem.Options{Keys: rotated})
	if err != nil {
		log.Fatal(err)
	}
	report, err := store.Rekey(ctx)
	fmt.Printf("rekeyed %d of %d, err %v\n", report.Rekeyed, report.Scanned, err)
	store.Close()

	only, _ := keyring.New(next)
	store, err = idem.Open(dir, &idem.Options{Keys: only})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	res, replayed, err := store.Do(ctx, req, func(context.Context) (idem.Result, error) {
		return idem.Result{}, fmt.Errorf("must not run again")
	})
	fmt.Println(res.Status, string(res.Body), replayed, err)
	// Output:
	// rekeyed 1 of 1, err <nil>
	// 201 {"iban":"DE89370400440532013000"} true <nil>
}

// ExampleStore_Inspect reads, without the key, the story of a record whose
// result is sealed, and is refused when it would settle a result in clear
// into the encrypted store, until it says that this result may be.
func ExampleStore_Inspect() {
	dir, _ := os.MkdirTemp("", "idem-inspect")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	ring, _ := keyring.New(keyring.Key{ID: "k1", Secret: bytes.Repeat([]byte{1}, keyring.KeySize)})
	store, err := idem.Open(dir, &idem.Options{Keys: ring, CloseTimeout: time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	_, _, _ = store.Do(ctx, idem.Request{Scope: "tenant-42", Key: "done-1", Fingerprint: "fp"},
		func(context.Context) (idem.Result, error) {
			return idem.Result{Status: 201, Body: []byte(`{"iban":"DE89370400440532013000"}`)}, nil
		})
	_, _, _ = store.Begin(ctx, idem.Request{Scope: "tenant-42", Key: "stuck-1", Fingerprint: "fp"})
	store.Close() // the claim stays open, as after a crash

	plain, err := idem.Open(dir, nil) // an operator without the key
	if err != nil {
		log.Fatal(err)
	}
	defer plain.Close()
	rec, sealedUnder, err := plain.Inspect(ctx, "tenant-42", "done-1")
	fmt.Println(rec.State, rec.Claims, rec.Result.Status, len(rec.Result.Body), sealedUnder, err)

	res := idem.Result{Status: 201, Body: []byte(`{"refund":"re_1"}`)}
	err = plain.Settle(ctx, "tenant-42", "stuck-1", idem.VerdictCommitted, res, "ana: the ledger has re_1", nil)
	fmt.Println(errors.Is(err, idem.ErrKeysNeeded))
	err = plain.Settle(ctx, "tenant-42", "stuck-1", idem.VerdictCommitted, res, "ana: the ledger has re_1",
		&idem.SettleOptions{InClear: true})
	rec, _ = plain.Get(ctx, "tenant-42", "stuck-1")
	fmt.Println(err, rec.Recovered)
	// Output:
	// done 1 201 0 k1 <nil>
	// true
	// <nil> settled: committed, in clear
}
