package pgstore_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/pgstore"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A refund whose ledger lives in the same database: the ledger row and the
// key's record commit in one transaction, so the refund is booked exactly
// when its key is done, even if this process pauses past its lease. No
// Resolver is needed for such claims.
//
// The example needs a server, so it is compiled but not run.
func ExampleBackend_BeginTx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	backend, err := pgstore.New(ctx, pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	store := idem.New(backend, nil)
	defer store.Close()

	req := idem.Request{Key: idem.KeyDeriver{}.Effect("run-7", "refund:order-123"), Fingerprint: "sha256:..."}
	res, replayed, err := idem.DoTx(ctx, store, req, func(ctx context.Context, tx pgx.Tx) (idem.Result, error) {
		_, err := tx.Exec(ctx, `INSERT INTO refunds (order_id, amount) VALUES ($1, $2)`, "order-123", 1250)
		return idem.Result{Status: 201}, err
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Status, replayed)
}
