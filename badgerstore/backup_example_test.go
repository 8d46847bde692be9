package badgerstore_test

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/badgerstore"
)

// A backup taken while the store serves, restored into another directory:
// the refund made before it replays there.
func ExampleStore_Backup() {
	dir, _ := os.MkdirTemp("", "idem-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	refund := func(context.Context) (backend.Result, error) {
		return backend.Result{Status: 201, Body: []byte(`{"refund":"re_1"}`)}, nil
	}

	store, err := idem.Open(filepath.Join(dir, "live"), nil)
	if err != nil {
		log.Fatal(err)
	}
	if _, _, err := store.Do(ctx, idem.Request{Key: "refund:order-1"}, refund); err != nil {
		log.Fatal(err)
	}
	var file bytes.Buffer // in practice a file, or GET backup on idemadmin.Handler
	if _, err := store.Backup(ctx, &file); err != nil {
		log.Fatal(err)
	}
	store.Close()

	if _, err := badgerstore.Restore(ctx, &file, filepath.Join(dir, "restored"), badgerstore.Options{}); err != nil {
		log.Fatal(err)
	}
	restored, err := idem.Open(filepath.Join(dir, "restored"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer restored.Close()
	res, replayed, err := restored.Do(ctx, idem.Request{Key: "refund:order-1"}, refund)
	fmt.Println(res.Status, string(res.Body), replayed, err)
	// Output: 201 {"refund":"re_1"} true <nil>
}
