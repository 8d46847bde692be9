package idem_test

import (
	"context"
	"database/sql"
	"log"

	"github.com/idemkit/idem"
)

// A debit in another database, fenced by the claim's token: a holder that
// was paused while its claim was recovered and run again finds a newer
// token in the row's fence column and changes nothing.
//
// The example needs a database, so it is compiled but not run.
func ExampleExecFenced() {
	var db *sql.DB // the other database, opened by the caller
	store, err := idem.Open("/var/lib/app/idem", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	req := idem.Request{Key: "debit-order-123", Fingerprint: "sha256:..."}
	_, _, err = store.Do(context.Background(), req, func(ctx context.Context) (idem.Result, error) {
		// ExecFenced appends the token as the last argument ($3).
		_, err := idem.ExecFenced(ctx, db,
			`UPDATE accounts SET balance = balance - $2, fence = $3 WHERE id = $1 AND fence < $3`, "acc-9", 1250)
		return idem.Result{Status: 200}, err
	})
	if err != nil {
		log.Fatal(err)
	}
}
