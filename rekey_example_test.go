package idem_test

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"os"

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
