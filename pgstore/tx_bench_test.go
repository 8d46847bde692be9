package pgstore_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/pgstore"
	"github.com/jackc/pgx/v5"
)

// BenchmarkLedgerEffect measures a first request whose effect is one
// ledger INSERT in the same database: with DoTx (the INSERT and the
// completion in one transaction, after the claim and DoTx's mark) against
// plain Do with the INSERT committed on its own between the claim and the
// completion.
func BenchmarkLedgerEffect(b *testing.B) {
	for _, mode := range []string{"DoTx", "Do+insert"} {
		for _, g := range benchGoroutines {
			b.Run(fmt.Sprintf("%s/goroutines=%d", mode, g), func(b *testing.B) {
				p := newPool(b, int32(max(2*g, 4)))
				backend := newBackend(b, p, nil)
				ledger := backend.Table()[:len(backend.Table())-1] + `_ledger"`
				if _, err := p.Exec(ctx, "CREATE TABLE "+ledger+" (key text NOT NULL, amount bigint NOT NULL)"); err != nil {
					b.Fatal(err)
				}
				s := idem.New(backend, &idem.Options{SweepInterval: -1})
				defer s.Close()
				warm(b, p, 2*g)
				insert := "INSERT INTO " + ledger + " (key, amount) VALUES ($1, 1250)"
				prefix := keyPrefix()
				var n atomic.Int64
				runGoroutines(b, g, func() error {
					req := idem.Request{Scope: "bench", Key: prefix + strconv.FormatInt(n.Add(1), 10), Fingerprint: "sha256:0123456789abcdef"}
					var err error
					if mode == "DoTx" {
						_, _, err = pgstore.DoTx(ctx, s, req, func(ctx context.Context, tx pgx.Tx) (idem.Result, error) {
							_, err := tx.Exec(ctx, insert, req.Key)
							return benchResult, err
						})
					} else {
						_, _, err = s.Do(ctx, req, func(ctx context.Context) (idem.Result, error) {
							_, err := p.Exec(ctx, insert, req.Key)
							return benchResult, err
						})
					}
					return err
				})
			})
		}
	}
}
