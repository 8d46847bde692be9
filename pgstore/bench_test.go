package pgstore_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/pgstore"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/vmihailenco/msgpack/v5"
)

// The benchmarks measure one claim and one completion on a fresh key, the
// path of every first request, at 1 and 32 goroutines: through a Store on
// pgstore, and as the bare statements a hand-written pgx implementation
// would send, so that the backend's and the Store's overhead is known.
// With the throwaway cluster (fsync off) they measure round trips and CPU;
// point IDEM_POSTGRES_URL at a real server to include its commits.

var benchGoroutines = []int{1, 32}

// runGoroutines calls fn b.N times from g goroutines.
func runGoroutines(b *testing.B, g int, fn func() error) {
	b.ResetTimer()
	if g == 1 {
		for range b.N {
			if err := fn(); err != nil {
				b.Fatal(err)
			}
		}
	} else {
		b.SetParallelism((g + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := fn(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cycles/s")
}

// warm opens n connections of p before the timer starts, so that no
// benchmark pays for connecting.
func warm(b *testing.B, p *pgxpool.Pool, n int) {
	var conns []*pgxpool.Conn
	for range n {
		c, err := p.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}
}

// keyPrefix makes each benchmark run's keys fresh.
func keyPrefix() string {
	var id [6]byte
	_, _ = rand.Read(id[:])
	return hex.EncodeToString(id[:]) + "-"
}

var benchResult = idem.Result{Status: 200, Header: map[string][]string{"Content-Type": {"application/json"}},
	Body: []byte(`{"refund":"re_123","status":"succeeded"}`)}

func BenchmarkClaimComplete(b *testing.B) {
	for _, g := range benchGoroutines {
		b.Run(fmt.Sprintf("goroutines=%d", g), func(b *testing.B) {
			p, sent := newCountedPool(b, int32(max(g, 4)))
			s := idem.New(newBackend(b, p, nil), &idem.Options{SweepInterval: -1})
			defer s.Close()
			warm(b, p, g)
			prefix := keyPrefix()
			var n atomic.Int64
			defer costs(b, p, sent)()
			runGoroutines(b, g, func() error {
				key := prefix + strconv.FormatInt(n.Add(1), 10)
				c, _, err := s.Begin(ctx, idem.Request{Scope: "bench", Key: key, Fingerprint: "sha256:0123456789abcdef"})
				if err != nil {
					return err
				}
				return c.Complete(ctx, benchResult)
			})
		})
	}
}

func BenchmarkBarePgx(b *testing.B) { barePgx(b, false) }

// BenchmarkBarePgxHeapOnly is BenchmarkBarePgx on the records table with
// its stale and expiry indexes dropped: the completion changes no indexed
// column, so PostgreSQL can write it heap-only (HOT). Against
// BenchmarkBarePgx it shows what those two indexes cost a cycle, and
// against BenchmarkBarePgxNarrow what the row's width costs.
func BenchmarkBarePgxHeapOnly(b *testing.B) { barePgx(b, true) }

// barePgx runs the two statements a hand-written pgx store sends for a
// cycle on pgstore's records table; heapOnly drops every index but the
// primary key first.
func barePgx(b *testing.B, heapOnly bool) {
	for _, g := range benchGoroutines {
		b.Run(fmt.Sprintf("goroutines=%d", g), func(b *testing.B) {
			p, sent := newCountedPool(b, int32(max(g, 4)))
			be := newBackend(b, p, nil) // the same table, indexes and sequence
			if heapOnly {
				dropSecondaryIndexes(b, p, tableName(be))
			}
			warm(b, p, g)
			seq := pgx.Identifier{server.schema, tableName(be) + "_token"}.Sanitize()
			zero := strconv.FormatInt(math.MinInt64, 10)
			// The claim an idiomatic implementation would write: one upsert
			// that takes an absent, released or expired key.
			claim := `INSERT INTO ` + be.Table() + ` AS r (scope, key, format, state, fingerprint, token, lease_ends,
	expires_at, retention, result, first_seen, claimed_at, done_at, claims, checks, next_check, attention,
	recovered, owner, sweeper, sweep_until)
VALUES ($1, $2, 1, 1, $3, nextval('` + seq + `'), $4, ` + zero + `, $5, NULL, $6, $6, ` + zero + `, 1, 0, ` + zero + `, false, '', $7, '', ` + zero + `)
ON CONFLICT (scope, key) DO UPDATE SET state = 1, fingerprint = EXCLUDED.fingerprint, token = EXCLUDED.token,
	lease_ends = EXCLUDED.lease_ends, claimed_at = EXCLUDED.claimed_at, result = NULL
WHERE r.state = 3 OR (r.state = 2 AND r.expires_at <= $6)
RETURNING token`
			complete := `UPDATE ` + be.Table() + ` SET state = 2, result = $4, done_at = $5, expires_at = $6,
	recovered = '', checks = 0, next_check = ` + zero + `, attention = false, owner = '', sweeper = '', sweep_until = ` + zero + `
WHERE scope = $1 AND key = $2 AND state = 1 AND token = $3`
			prefix := keyPrefix()
			var n atomic.Int64
			defer costs(b, p, sent)()
			runGoroutines(b, g, func() error {
				key := prefix + strconv.FormatInt(n.Add(1), 10)
				now := time.Now()
				var token int64
				err := p.QueryRow(ctx, claim, "bench", key, []byte("sha256:0123456789abcdef"), now.Add(idem.DefaultLease).UnixNano(),
					int64(idem.DefaultRetention), now.UnixNano(), "bench").Scan(&token)
				if err != nil {
					return err
				}
				res, err := msgpack.Marshal(&benchResult)
				if err != nil {
					return err
				}
				now = time.Now()
				tag, err := p.Exec(ctx, complete, "bench", key, token, res, now.UnixNano(), now.Add(idem.DefaultRetention).UnixNano())
				if err != nil {
					return err
				}
				if tag.RowsAffected() != 1 {
					return fmt.Errorf("complete of %s changed %d rows", key, tag.RowsAffected())
				}
				return nil
			})
		})
	}
}

// dropSecondaryIndexes drops every index of the table in the tests'
// schema but its primary key.
func dropSecondaryIndexes(b *testing.B, p *pgxpool.Pool, table string) {
	rows, err := p.Query(ctx, `SELECT i.relname FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
	JOIN pg_class t ON t.oid = x.indrelid JOIN pg_namespace n ON n.oid = t.relnamespace
	WHERE n.nspname = $1 AND t.relname = $2 AND NOT x.indisprimary`, server.schema, table)
	if err != nil {
		b.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		b.Fatal(err)
	}
	if len(names) == 0 {
		b.Fatalf("table %s has no secondary index to drop", table)
	}
	for _, name := range names {
		if _, err := p.Exec(ctx, "DROP INDEX "+pgx.Identifier{server.schema, name}.Sanitize()); err != nil {
			b.Fatal(err)
		}
	}
}

// costs starts counting what the pool sends (each query or batch a round
// trip) and the WAL the server writes; the function it returns reports
// both per operation. The WAL is the server's, every session's: run one
// benchmark at a time.
func costs(b *testing.B, p *pgxpool.Pool, sent *sendCounter) func() {
	wal0 := walBytes(b, p)
	server0, client0 := serverCPU(b, p), clientCPU()
	sent.sends.Store(0)
	return func() {
		b.ReportMetric(float64(sent.sends.Load())/float64(b.N), "sends/op")
		b.ReportMetric(float64(walBytes(b, p)-wal0)/float64(b.N), "WAL-B/op")
		if server0 >= 0 {
			b.ReportMetric(float64(serverCPU(b, p)-server0)/1e3/float64(b.N), "server-CPU-us/op")
		}
		b.ReportMetric(float64(clientCPU()-client0)/1e3/float64(b.N), "client-CPU-us/op")
	}
}

// serverCPU returns the CPU time, in nanoseconds, the server's processes
// have used (those pg_stat_activity lists, read from /proc: the server
// must run on this machine, as the tests' own cluster does), or -1 where
// it cannot be read. Unlike wall-clock time it hardly depends on what else
// the machine runs.
func serverCPU(b *testing.B, p *pgxpool.Pool) int64 {
	rows, err := p.Query(ctx, "SELECT pid FROM pg_stat_activity")
	if err != nil {
		b.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		b.Fatal(err)
	}
	var total int64
	for _, pid := range pids {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return -1
		}
		// Fields 14 and 15 (utime, stime) follow the command in parentheses.
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		total += (ut + st) * int64(time.Second) / 100 // USER_HZ
	}
	return total
}

// clientCPU returns the CPU time, in nanoseconds, this process has used.
func clientCPU() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkClaimPath measures Backend.Claim itself on its two paths
// (SetReadFirst): the insert-and-take-over batch, and a SELECT first. On
// a done key (replay) the SELECT is the whole claim; on a fresh key
// (fresh) it misses and the batch follows. auto is the default choice;
// bare-pgx is the SELECT a hand-written pgx store sends for a replay.
// The Store's replay cache is not involved: the Backend is called directly,
// as a Store that has not seen the key calls it.
func BenchmarkClaimPath(b *testing.B) {
	const doneKeys = 2000
	for _, kind := range []string{"replay", "fresh"} {
		for _, mode := range []string{"never", "always", "auto", "bare-pgx"} {
			if kind == "fresh" && mode == "bare-pgx" {
				continue
			}
			for _, g := range benchGoroutines {
				b.Run(fmt.Sprintf("%s/%s/goroutines=%d", kind, mode, g), func(b *testing.B) {
					p := newPool(b, int32(max(g, 4)))
					be := newBackend(b, p, nil)
					defer be.Close()
					warm(b, p, g)
					prefix := keyPrefix()
					now := time.Now()
					args := func(now time.Time) backend.ClaimArgs {
						return backend.ClaimArgs{Fingerprint: "sha256:0123456789abcdef", Now: now,
							LeaseEnds: now.Add(idem.DefaultLease), Retention: idem.DefaultRetention, Owner: "bench"}
					}
					if kind == "replay" {
						for i := range doneKeys {
							key := prefix + strconv.Itoa(i)
							rec, _, err := be.Claim(ctx, "bench", key, args(now))
							if err != nil {
								b.Fatal(err)
							}
							err = be.Complete(ctx, "bench", key, rec.Token, backend.Completion{Result: benchResult,
								At: now, ExpiresAt: now.Add(idem.DefaultRetention)})
							if err != nil {
								b.Fatal(err)
							}
						}
					}
					if mode != "bare-pgx" {
						pgstore.SetReadFirst(be, mode)
					}
					bare := `SELECT state, fingerprint, result FROM ` + be.Table() + ` WHERE scope = $1 AND key = $2`
					var n atomic.Int64
					runGoroutines(b, g, func() error {
						i := n.Add(1)
						if kind == "replay" {
							key := prefix + strconv.FormatInt(i%doneKeys, 10)
							if mode == "bare-pgx" {
								return bareReplay(p, bare, key)
							}
							rec, claimed, err := be.Claim(ctx, "bench", key, args(time.Now()))
							if err == nil && (claimed || rec.State != idem.StateDone) {
								err = fmt.Errorf("replay of %s: claimed %v, state %v", key, claimed, rec.State)
							}
							return err
						}
						key := prefix + "f" + strconv.FormatInt(i, 10)
						_, claimed, err := be.Claim(ctx, "bench", key, args(time.Now()))
						if err == nil && !claimed {
							err = fmt.Errorf("fresh key %s not claimed", key)
						}
						return err
					})
				})
			}
		}
	}
}

// BenchmarkBackendCycle is BenchmarkClaimComplete without the Store: a
// Backend's Claim and Complete, so that the Store's share of a cycle is
// known.
func BenchmarkBackendCycle(b *testing.B) {
	for _, g := range benchGoroutines {
		b.Run(fmt.Sprintf("goroutines=%d", g), func(b *testing.B) {
			p, sent := newCountedPool(b, int32(max(g, 4)))
			be := newBackend(b, p, nil)
			defer be.Close()
			warm(b, p, g)
			prefix := keyPrefix()
			var n atomic.Int64
			defer costs(b, p, sent)()
			runGoroutines(b, g, func() error {
				key := prefix + strconv.FormatInt(n.Add(1), 10)
				now := time.Now()
				rec, _, err := be.Claim(ctx, "bench", key, backend.ClaimArgs{Fingerprint: "sha256:0123456789abcdef", Now: now,
					LeaseEnds: now.Add(idem.DefaultLease), Retention: idem.DefaultRetention, Owner: "bench"})
				if err != nil {
					return err
				}
				now = time.Now()
				return be.Complete(ctx, "bench", key, rec.Token, backend.Completion{Result: benchResult,
					At: now, ExpiresAt: now.Add(idem.DefaultRetention)})
			})
		})
	}
}

// BenchmarkBarePgxNarrow is the bench module's pgx-2w peer: the two
// durable writes on a table of six columns with its primary key alone,
// whose UPDATE is heap-only. Against BenchmarkBarePgx it shows what the
// records table's width and its stale and expiry indexes cost a cycle.
func BenchmarkBarePgxNarrow(b *testing.B) {
	for _, g := range benchGoroutines {
		b.Run(fmt.Sprintf("goroutines=%d", g), func(b *testing.B) {
			p, sent := newCountedPool(b, int32(max(g, 4)))
			table := pgx.Identifier{server.schema, uniqueTable("narrow")}.Sanitize()
			if _, err := p.Exec(ctx, `CREATE TABLE `+table+` (key text PRIMARY KEY, state smallint NOT NULL,
	fp text NOT NULL, lease_ends bigint NOT NULL, expires_at bigint NOT NULL, result bytea)`); err != nil {
				b.Fatal(err)
			}
			warm(b, p, g)
			prefix := keyPrefix()
			var n atomic.Int64
			defer costs(b, p, sent)()
			runGoroutines(b, g, func() error {
				key := prefix + strconv.FormatInt(n.Add(1), 10)
				var state int16
				err := p.QueryRow(ctx, `INSERT INTO `+table+` (key, state, fp, lease_ends, expires_at)
VALUES ($1, 1, $2, $3, 0) ON CONFLICT (key) DO NOTHING RETURNING state`,
					key, "sha256:0123456789abcdef", time.Now().Add(idem.DefaultLease).UnixNano()).Scan(&state)
				if err != nil {
					return err
				}
				res, err := msgpack.Marshal(&benchResult)
				if err != nil {
					return err
				}
				_, err = p.Exec(ctx, `UPDATE `+table+` SET state = 2, result = $1, expires_at = $2 WHERE key = $3 AND state = 1`,
					res, time.Now().Add(idem.DefaultRetention).UnixNano(), key)
				return err
			})
		})
	}
}

// BenchmarkReplayUncached measures a replay no Store has seen, through
// Store.Begin (store: every pass over the done keys on a Store of its own,
// as bench/'s idem-pg-uncached), through the Backend's Claim alone
// (backend), and as the SELECT a hand-written pgx store sends (bare-pgx).
// Each reports the client's and the server's CPU per replay, which the
// machine's load hardly moves. A new Backend starts on the
// insert-first path and reads first after its first answers; at 32
// goroutines its first statements are also the pool's connections' first
// INSERT and batch, prepared then, which the server's CPU per replay
// shows.
func BenchmarkReplayUncached(b *testing.B) {
	const doneKeys = 5000
	for _, mode := range []string{"store", "backend", "bare-pgx"} {
		for _, g := range benchGoroutines {
			b.Run(fmt.Sprintf("%s/goroutines=%d", mode, g), func(b *testing.B) {
				p, sent := newCountedPool(b, int32(max(g, 4)))
				be := newBackend(b, p, nil)
				s := idem.New(be, &idem.Options{SweepInterval: -1})
				defer s.Close()
				prefix := keyPrefix()
				for i := range doneKeys {
					c, _, err := s.Begin(ctx, idem.Request{Scope: "bench", Key: prefix + strconv.Itoa(i), Fingerprint: "sha256:0123456789abcdef"})
					if err != nil {
						b.Fatal(err)
					}
					if err := c.Complete(ctx, benchResult); err != nil {
						b.Fatal(err)
					}
				}
				// One Store per pass over the keys, opened before the timer.
				passes := make([]*idem.Store, b.N/doneKeys+2)
				for i := range passes {
					pb, err := pgstore.New(ctx, p, &pgstore.Options{Schema: server.schema, Table: tableName(be)})
					if err != nil {
						b.Fatal(err)
					}
					passes[i] = idem.New(pb, &idem.Options{SweepInterval: -1})
					defer passes[i].Close()
				}
				bare := `SELECT state, fingerprint, result FROM ` + be.Table() + ` WHERE scope = $1 AND key = $2`
				// Autovacuum's first pass over the new rows would otherwise
				// fall in the timed loop of whichever mode runs first.
				if _, err := p.Exec(ctx, "VACUUM ANALYZE "+be.Table()); err != nil {
					b.Fatal(err)
				}
				warm(b, p, g)
				var n atomic.Int64
				defer costs(b, p, sent)()
				runGoroutines(b, g, func() error {
					i := n.Add(1) - 1
					key := prefix + strconv.FormatInt(i%doneKeys, 10)
					if mode == "bare-pgx" {
						return bareReplay(p, bare, key)
					}
					if mode == "backend" {
						now := time.Now()
						rec, claimed, err := passes[i/doneKeys].Backend().Claim(ctx, "bench", key, backend.ClaimArgs{Fingerprint: "sha256:0123456789abcdef",
							Now: now, LeaseEnds: now.Add(idem.DefaultLease), Retention: idem.DefaultRetention, Brief: true})
						if err == nil && (claimed || rec.State != idem.StateDone) {
							err = fmt.Errorf("replay of %s: claimed %v", key, claimed)
						}
						return err
					}
					_, res, err := passes[i/doneKeys].Begin(ctx, idem.Request{Scope: "bench", Key: key, Fingerprint: "sha256:0123456789abcdef"})
					if err == nil && res == nil {
						err = fmt.Errorf("replay of %s: claimed", key)
					}
					return err
				})
			})
		}
	}
}

// bareReplay is the replay a hand-written pgx store sends: the SELECT
// bare of the key's state, fingerprint and result, bounded as the backend
// bounds its statements (Options.StatementTimeout): pgx watches a context
// that can end, at a cost per query.
func bareReplay(p *pgxpool.Pool, bare, key string) error {
	qctx, cancel := context.WithTimeout(ctx, pgstore.DefaultStatementTimeout)
	defer cancel()
	var state int16
	var fp, res []byte
	return p.QueryRow(qctx, bare, "bench", key).Scan(&state, &fp, &res)
}
