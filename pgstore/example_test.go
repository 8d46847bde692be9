package pgstore_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/pgstore"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A tool server with several replicas shares one PostgreSQL database: each
// replica makes a Backend on its pool and a Store on it, and every replica
// runs a refund once per key, however the retries are spread.
//
// The example needs a server, so it is compiled but not run.
func ExampleNew() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close() // the pool is ours: the store does not close it

	backend, err := pgstore.New(ctx, pool, &pgstore.Options{Table: "tool_idempotency"})
	if err != nil {
		log.Fatal(err) // the database is unreachable, or its schema is newer than this release
	}
	store := idem.New(backend, &idem.Options{
		// Asked about a claim whose holder died: did the refund happen?
		Resolver: idem.ResolverFunc(func(ctx context.Context, rec *idem.Record) (idem.Resolution, error) {
			return idem.Resolution{Verdict: idem.VerdictUnknown}, nil
		}),
	})
	defer store.Close()

	req := idem.Request{Scope: "tenant-42", Key: idem.KeyDeriver{}.Effect("run-7", "refund:order-123"), Fingerprint: "sha256:..."}
	res, replayed, err := store.Do(ctx, req, func(ctx context.Context) (idem.Result, error) {
		// Call the payment provider here.
		return idem.Result{Status: 200, Body: []byte(`{"refund":"re_1"}`)}, nil
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Status, replayed)
}
