package pgstore_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// BenchmarkLedgerEffect measures a first request whose effect is one
// ledger INSERT in the same database: with DoTx (the INSERT and the
// completion in one transaction, after the claim and DoTx's mark) against
// plain Do with the INSERT committed on its own between the claim and the
// completion. Besides time it reports what each cycle sends (queries and
// batches: each a round trip) and the WAL it writes, which the machine's
// load does not change.
func BenchmarkLedgerEffect(b *testing.B) {
	for _, mode := range []string{"DoTx", "Do+insert"} {
		for _, g := range benchGoroutines {
			b.Run(fmt.Sprintf("%s/goroutines=%d", mode, g), func(b *testing.B) {
				p, sent := newCountedPool(b, int32(max(2*g, 4)))
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
				cycle := func() error {
					req := idem.Request{Scope: "bench", Key: prefix + strconv.FormatInt(n.Add(1), 10), Fingerprint: "sha256:0123456789abcdef"}
					var err error
					if mode == "DoTx" {
						_, _, err = idem.DoTx(ctx, s, req, func(ctx context.Context, tx pgx.Tx) (idem.Result, error) {
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
				}
				// Untimed cycles on every connection first: each prepares
				// the statements it sends once, and the table's first pages
				// are written.
				var wg sync.WaitGroup
				for range g {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range 4 {
							if err := cycle(); err != nil {
								b.Error(err)
							}
						}
					}()
				}
				wg.Wait()
				wal0 := walBytes(b, p)
				sent.sends.Store(0)
				runGoroutines(b, g, cycle)
				sends := sent.sends.Load()
				b.ReportMetric(float64(sends)/float64(b.N), "sends/op")
				b.ReportMetric(float64(walBytes(b, p)-wal0)/float64(b.N), "WAL-B/op")
			})
		}
	}
}

// newCountedPool is newPool whose pool counts what it sends.
func newCountedPool(tb testing.TB, maxConns int32) (*pgxpool.Pool, *sendCounter) {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(needServer(tb))
	if err != nil {
		tb.Fatal(err)
	}
	cfg.MaxConns = maxConns
	c := &sendCounter{}
	cfg.ConnConfig.Tracer = c
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(p.Close)
	return p, c
}

// walBytes returns the server's WAL position in bytes: the difference of
// two readings is what was logged in between, by every session.
func walBytes(tb testing.TB, p *pgxpool.Pool) int64 {
	tb.Helper()
	var n int64
	if err := p.QueryRow(ctx, "SELECT (pg_current_wal_lsn() - '0/0')::bigint").Scan(&n); err != nil {
		tb.Fatal(err)
	}
	return n
}
