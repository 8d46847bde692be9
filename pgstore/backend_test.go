package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/pgstore"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// These tests call the backend directly, for what the conformance suite
// cannot see: several instances on one table, the schema, the database's
// failures.

var (
	ctx   = context.Background()
	epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
)

const (
	lease     = 10 * time.Second
	retention = time.Hour
)

func claimArgs(fp string, now time.Time) backend.ClaimArgs {
	return backend.ClaimArgs{Fingerprint: fp, Now: now, LeaseEnds: now.Add(lease), Retention: retention, Owner: "test"}
}

func result(body string) idem.Result {
	return idem.Result{Status: 200, Header: map[string][]string{"Content-Type": {"text/plain"}}, Body: []byte(body)}
}

// mustExec runs sql on the shared pool.
func mustExec(t testing.TB, sql string, args ...any) pgconn.CommandTag {
	t.Helper()
	tag, err := pool(t).Exec(ctx, sql, args...)
	require.NoError(t, err, sql)
	return tag
}

func TestNew_ConcurrentStartsMigrateOnce(t *testing.T) {
	table := uniqueTable("mig")
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A pool each: separate sessions, as separate processes have.
			p := newPool(t, 2)
			b, err := pgstore.New(ctx, p, &pgstore.Options{Schema: server.schema, Table: table})
			if err == nil {
				err = b.Close()
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	var versions []int32
	rows, err := pool(t).Query(ctx, "SELECT version FROM "+pgx.Identifier{server.schema, table + "_version"}.Sanitize()+" ORDER BY version")
	require.NoError(t, err)
	versions, err = pgx.CollectRows(rows, pgx.RowTo[int32])
	require.NoError(t, err)
	require.Equal(t, []int32{1, 2, 3, 4}, versions, "each migration is recorded once")

	// Opening again changes nothing and keeps the data.
	b, err := pgstore.New(ctx, pool(t), &pgstore.Options{Schema: server.schema, Table: table})
	require.NoError(t, err)
	_, claimed, err := b.Claim(ctx, "s", "k", claimArgs("fp", epoch))
	require.NoError(t, err)
	require.True(t, claimed)
	b2, err := pgstore.New(ctx, pool(t), &pgstore.Options{Schema: server.schema, Table: table})
	require.NoError(t, err)
	got, err := b2.Get(ctx, "s", "k")
	require.NoError(t, err)
	require.Equal(t, idem.StateInProgress, got.State)
}

func TestNew_DefaultTableInSearchPath(t *testing.T) {
	schema := uniqueTable("sp")
	mustExec(t, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize())
	t.Cleanup(func() { mustExec(t, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE") })
	cfg, err := pgxpool.ParseConfig(needServer(t))
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer p.Close()

	b, err := pgstore.New(ctx, p, nil)
	require.NoError(t, err)
	require.Equal(t, pgx.Identifier{schema, pgstore.DefaultTable}.Sanitize(), b.Table())
	var n int
	require.NoError(t, p.QueryRow(ctx, "SELECT count(*) FROM "+pgstore.DefaultTable).Scan(&n))
}

func TestNew_CreatesNamedSchema(t *testing.T) {
	schema := uniqueTable("named")
	t.Cleanup(func() { mustExec(t, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE") })
	b, err := pgstore.New(ctx, pool(t), &pgstore.Options{Schema: schema})
	require.NoError(t, err)
	_, claimed, err := b.Claim(ctx, "", "k", claimArgs("fp", epoch))
	require.NoError(t, err)
	require.True(t, claimed)
}

func TestNew_SchemaFromNewerRelease(t *testing.T) {
	table := uniqueTable("newer")
	newBackend(t, pool(t), &pgstore.Options{Table: table})
	mustExec(t, "INSERT INTO "+pgx.Identifier{server.schema, table + "_version"}.Sanitize()+
		" (version, description) VALUES (99, 'from the future')")
	_, err := pgstore.New(ctx, pool(t), &pgstore.Options{Schema: server.schema, Table: table})
	require.ErrorIs(t, err, pgstore.ErrSchemaVersion)
}

func TestNew_BadOptions(t *testing.T) {
	_, err := pgstore.New(ctx, pool(t), &pgstore.Options{Table: strings.Repeat("x", pgstore.MaxTableLen+1)})
	require.Error(t, err)
	_, err = pgstore.New(ctx, nil, nil)
	require.Error(t, err)
}

func TestNew_ServerUnreachable(t *testing.T) {
	p, url := newProxy(t)
	p.cut()
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.ConnConfig.ConnectTimeout = 2 * time.Second
	pl, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer pl.Close()
	_, err = pgstore.New(ctx, pl, nil)
	require.ErrorIs(t, err, idem.ErrUnavailable)
}

func TestBackend_Close_LeavesPoolOpen(t *testing.T) {
	p := newPool(t, 2)
	b := newBackend(t, p, nil)
	s := idem.New(b, &idem.Options{SweepInterval: -1})
	_, _, err := s.Do(ctx, idem.Request{Key: "k", Fingerprint: "fp"}, func(context.Context) (idem.Result, error) {
		return result("x"), nil
	})
	require.NoError(t, err)
	require.NoError(t, s.Close(), "the store closes its backend")
	require.NoError(t, p.Ping(ctx), "closing the backend closed the caller's pool")
	_, err = b.Get(ctx, "", "k")
	require.ErrorIs(t, err, idem.ErrClosed)
	// Another backend on the same pool and table still serves.
	again := newBackend(t, p, &pgstore.Options{Table: tableName(b)})
	rec, err := again.Get(ctx, "", "k")
	require.NoError(t, err)
	require.Equal(t, "x", string(rec.Result.Body))
}

// TestBackend_Claim_OneWinnerAcrossPools races claimers with a pool each
// (separate sessions) on absent, released and expired keys.
func TestBackend_Claim_OneWinnerAcrossPools(t *testing.T) {
	const pools, perPool, keys = 4, 8, 30
	b0 := newBackend(t, pool(t), nil)
	backends := make([]*pgstore.Backend, pools)
	for i := range backends {
		backends[i] = newBackend(t, newPool(t, perPool), &pgstore.Options{Table: tableName(b0)})
	}
	// Keys k-0..: absent. r-..: released once. x-..: done and expired.
	now := epoch
	for i := range keys {
		rec, _, err := b0.Claim(ctx, "s", fmt.Sprintf("r-%d", i), claimArgs("fp", now))
		require.NoError(t, err)
		require.NoError(t, b0.Release(ctx, "s", rec.Key, rec.Token, backend.Releasing{At: now, ExpiresAt: now.Add(retention)}))
		rec, _, err = b0.Claim(ctx, "s", fmt.Sprintf("x-%d", i), claimArgs("fp", now))
		require.NoError(t, err)
		require.NoError(t, b0.Complete(ctx, "s", rec.Key, rec.Token, backend.Completion{Result: result("old"), At: now, ExpiresAt: now.Add(time.Minute)}))
	}
	later := now.Add(time.Minute) // the done records expire exactly now
	for _, prefix := range []string{"k", "r", "x"} {
		for i := range keys {
			key := fmt.Sprintf("%s-%d", prefix, i)
			var (
				wg      sync.WaitGroup
				wins    atomic.Int32
				mu      sync.Mutex
				winner  uint64
				tokens  = map[uint64]int{}
				start   = make(chan struct{})
				errs    = make(chan error, pools*perPool)
				records = make(chan *idem.Record, pools*perPool)
			)
			for _, b := range backends {
				for range perPool {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						rec, claimed, err := b.Claim(ctx, "s", key, claimArgs("fp-new", later))
						if err != nil {
							errs <- err
							return
						}
						if claimed {
							wins.Add(1)
							mu.Lock()
							winner = rec.Token
							mu.Unlock()
						}
						records <- rec
					}()
				}
			}
			close(start)
			wg.Wait()
			close(errs)
			close(records)
			for err := range errs {
				t.Fatal(err)
			}
			require.Equal(t, int32(1), wins.Load(), "key %s: %d claimers won", key, wins.Load())
			for rec := range records {
				tokens[rec.Token]++
				require.Equal(t, idem.StateInProgress, rec.State)
				require.Equal(t, "fp-new", rec.Fingerprint, "a loser saw the old record")
			}
			require.Equal(t, map[uint64]int{winner: pools * perPool}, tokens, "key %s: every claimer sees the winner's claim", key)
			got, err := b0.Get(ctx, "s", key)
			require.NoError(t, err)
			require.Equal(t, winner, got.Token)
			switch prefix {
			case "r":
				require.Equal(t, 2, got.Claims, "a released record's story goes on")
				require.True(t, got.FirstSeen.Equal(now))
			case "x":
				require.Equal(t, 1, got.Claims, "an expired record starts afresh")
				require.True(t, got.FirstSeen.Equal(later))
				require.Nil(t, got.Result)
			}
		}
	}
}

// tableName returns the unquoted table name of a backend of this run's
// schema.
func tableName(b *pgstore.Backend) string {
	s := b.Table()
	s = s[strings.LastIndex(s, ".")+1:]
	return strings.Trim(s, `"`)
}

func TestBackend_Times_RoundTripExactly(t *testing.T) {
	b := newBackend(t, pool(t), nil)
	now := time.Date(2026, 5, 6, 7, 8, 9, 123456789, time.FixedZone("X", 3600))
	a := claimArgs("fp", now)
	a.LeaseEnds = now.Add(time.Nanosecond)
	rec, claimed, err := b.Claim(ctx, "s", "k", a)
	require.NoError(t, err)
	require.True(t, claimed)
	require.True(t, rec.FirstSeen.Equal(now), "%v != %v", rec.FirstSeen, now)
	require.True(t, rec.LeaseEnds.Equal(now.Add(time.Nanosecond)))
	require.True(t, rec.NextCheck.IsZero())
	require.True(t, rec.ExpiresAt.IsZero())
	require.True(t, rec.DoneAt.IsZero())
	require.Equal(t, retention, rec.Retention)

	// A lease that ends a nanosecond after now is not stale; at its end it is.
	stale, err := b.Stale(ctx, now, 10)
	require.NoError(t, err)
	require.Empty(t, stale)
	stale, err = b.Stale(ctx, now.Add(time.Nanosecond), 10)
	require.NoError(t, err)
	require.Len(t, stale, 1)

	// A retention that runs past what int64 nanoseconds hold is clamped, and
	// the record still never expires before it.
	far := now.AddDate(300, 0, 0)
	require.NoError(t, b.Complete(ctx, "s", "k", rec.Token, backend.Completion{Result: result("x"), At: now, ExpiresAt: far}))
	got, err := b.Get(ctx, "s", "k")
	require.NoError(t, err)
	require.True(t, got.ExpiresAt.Equal(time.Unix(0, math.MaxInt64)))
	require.True(t, got.DoneAt.Equal(now))
	_, claimed, err = b.Claim(ctx, "s", "k", claimArgs("fp", now.AddDate(200, 0, 0)))
	require.NoError(t, err)
	require.False(t, claimed)
}

func TestBackend_Strings_KeptExactly(t *testing.T) {
	b := newBackend(t, pool(t), nil)
	// Fingerprints and results are bytes: whatever the caller gives comes back.
	fp := "sha256:\x00\xff\xfe binary"
	rec, claimed, err := b.Claim(ctx, "scöpe", "k ~!", backend.ClaimArgs{Fingerprint: fp, Now: epoch, LeaseEnds: epoch.Add(lease), Owner: "own\xffer"})
	require.NoError(t, err)
	require.True(t, claimed)
	require.Equal(t, fp, rec.Fingerprint)
	require.Equal(t, "own\uFFFDer", rec.Owner, "informational text is made valid UTF-8")
	res := idem.Result{Status: 201, Header: map[string][]string{"X-Raw": {"\xff\x00"}}, Body: []byte{0, 1, 2, 255},
		Error: "err\x00\xff", Truncated: true}
	require.NoError(t, b.Complete(ctx, "scöpe", "k ~!", rec.Token, backend.Completion{Result: res, At: epoch, ExpiresAt: epoch.Add(retention), Recovered: "bad\x00text\xff"}))
	got, err := b.Get(ctx, "scöpe", "k ~!")
	require.NoError(t, err)
	require.Equal(t, &res, got.Result)
	require.Equal(t, "badtext\uFFFD", got.Recovered)
	require.Equal(t, fp, got.Fingerprint)

	_, _, err = b.Claim(ctx, "s", "nul\x00", claimArgs("fp", epoch))
	require.ErrorIs(t, err, idem.ErrInvalidKey)
	_, err = b.Get(ctx, "bad\nscope", "k")
	require.ErrorIs(t, err, idem.ErrInvalidKey)
}

// staleClaims makes n claims on b whose leases end at epoch+1s.. in order.
func staleClaims(t testing.TB, b backend.Backend, n int) map[string]uint64 {
	t.Helper()
	tokens := map[string]uint64{}
	for i := range n {
		a := claimArgs("fp", epoch)
		a.LeaseEnds = epoch.Add(time.Duration(i+1) * time.Second)
		rec, claimed, err := b.Claim(ctx, "s", fmt.Sprintf("k-%04d", i), a)
		require.NoError(t, err)
		require.True(t, claimed)
		tokens[rec.Key] = rec.Token
	}
	return tokens
}

func keysOf(recs []*idem.Record) []string {
	var keys []string
	for _, r := range recs {
		keys = append(keys, r.Key)
	}
	return keys
}

func TestBackend_Stale_HandsEachClaimToOneInstance(t *testing.T) {
	const handOut = time.Minute
	a := newBackend(t, pool(t), &pgstore.Options{HandOut: handOut})
	b := newBackend(t, pool(t), &pgstore.Options{Table: tableName(a), HandOut: handOut})
	tokens := staleClaims(t, a, 5)
	now := epoch.Add(time.Hour)

	got, err := a.Stale(ctx, now, 3)
	require.NoError(t, err)
	require.Equal(t, []string{"k-0000", "k-0001", "k-0002"}, keysOf(got), "oldest lease first")
	got, err = b.Stale(ctx, now, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"k-0003", "k-0004"}, keysOf(got), "another instance gets only what is not handed out")
	got, err = a.Stale(ctx, now, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"k-0000", "k-0001", "k-0002"}, keysOf(got), "an instance sees its own hand-outs again")

	// A fenced write ends the hand-out: the claim is visible to everyone
	// as it now is.
	require.NoError(t, a.Defer(ctx, "s", "k-0001", tokens["k-0001"], backend.Deferral{Checks: 1, NextCheck: now}))
	got, err = b.Stale(ctx, now, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"k-0001", "k-0003", "k-0004"}, keysOf(got))
	require.Equal(t, 1, got[0].Checks)

	// A hand-out whose holder went quiet lapses after HandOut of store time.
	got, err = b.Stale(ctx, now.Add(handOut), 10)
	require.NoError(t, err)
	require.Equal(t, []string{"k-0000", "k-0001", "k-0002", "k-0003", "k-0004"}, keysOf(got))
	got, err = a.Stale(ctx, now.Add(handOut), 10)
	require.NoError(t, err)
	require.Empty(t, got)

	// Resolving through the store works from the instance that holds them.
	s := newStore(t, b, &idem.Options{SweepInterval: -1, Clock: idemtest.NewClock(now.Add(handOut)),
		Resolver: idem.ResolverFunc(func(context.Context, *idem.Record) (idem.Resolution, error) {
			return idem.Resolution{Verdict: idem.VerdictNotCommitted}, nil
		})})
	rep, err := s.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 5, rep.NotCommitted)
}

// TestBackend_Stale_ConcurrentSweepersNeverShare runs instances' Stale calls
// at once and checks that no claim went to two of them.
func TestBackend_Stale_ConcurrentSweepersNeverShare(t *testing.T) {
	const instances, claims = 6, 300
	first := newBackend(t, pool(t), nil)
	staleClaims(t, first, claims)
	owner := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, instances)
	for i := range instances {
		b := newBackend(t, newPool(t, 2), &pgstore.Options{Table: tableName(first)})
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for range 20 {
				got, err := b.Stale(ctx, epoch.Add(time.Hour), 16)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				for _, r := range got {
					if o, ok := owner[r.Key]; ok && o != i {
						errs <- fmt.Errorf("%s handed to instances %d and %d", r.Key, o, i)
					}
					owner[r.Key] = i
				}
				mu.Unlock()
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	require.NotEmpty(t, owner)
}

func TestBackend_Reclaim_ConcurrentInstances(t *testing.T) {
	const instances, records = 4, 1200
	first := newBackend(t, pool(t), nil)
	mustExec(t, "INSERT INTO "+first.Table()+` (scope, key, format, state, fingerprint, token, lease_ends, expires_at,
		retention, result, first_seen, claimed_at, done_at, claims, checks, next_check, attention, recovered, owner,
		sweeper, sweep_until)
	SELECT 's', 'k-' || i, 1, 3, 'fp', i, 0, $1::bigint + i, 0, NULL, 0, 0, 0, 1, 0, 0, false, '', '', '', 0
	FROM generate_series(1, $2) AS i`, epoch.UnixNano(), records)
	var (
		mu   sync.Mutex
		seen = map[string]int{}
		wg   sync.WaitGroup
		errs = make(chan error, instances)
	)
	for range instances {
		b := newBackend(t, newPool(t, 2), &pgstore.Options{Table: tableName(first)})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				refs, err := b.Reclaim(ctx, epoch.Add(time.Hour), 100)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				for _, r := range refs {
					seen[r.Key]++
				}
				n := len(seen)
				mu.Unlock()
				if len(refs) > 100 {
					errs <- fmt.Errorf("Reclaim returned %d refs, more than its limit", len(refs))
					return
				}
				if len(refs) == 0 && n == records {
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	require.Len(t, seen, records)
	for k, n := range seen {
		require.Equal(t, 1, n, "%s reported deleted %d times", k, n)
	}
	var left int
	require.NoError(t, pool(t).QueryRow(ctx, "SELECT count(*) FROM "+first.Table()).Scan(&left))
	require.Zero(t, left)
}

func TestBackend_Scan(t *testing.T) {
	b := newBackend(t, pool(t), nil)
	var want []string
	for i := range 600 {
		scope := []string{"", "a", "b"}[i%3]
		key := fmt.Sprintf("k-%04d", i)
		_, _, err := b.Claim(ctx, scope, key, claimArgs("fp", epoch))
		require.NoError(t, err)
		want = append(want, scope+"/"+key)
	}
	sort.Strings(want)
	var got []string
	require.NoError(t, b.Scan(ctx, func(r *idem.Record) bool {
		got = append(got, r.Scope+"/"+r.Key)
		return true
	}))
	require.Equal(t, want, got)
	n := 0
	require.NoError(t, b.Scan(ctx, func(*idem.Record) bool { n++; return n < 300 }))
	require.Equal(t, 300, n)
}

func TestBackend_CorruptRows(t *testing.T) {
	for _, tc := range []struct{ name, set string }{
		{"newer format", "format = 99"},
		{"unknown state", "state = 7"},
		{"done without result", "state = 2, result = NULL, expires_at = 9223372036854775807"},
		{"result not msgpack", `state = 2, result = '\xc1', expires_at = 9223372036854775807`},
		{"result cut short", `state = 2, result = '\x81a162c4106162', expires_at = 9223372036854775807`},
		{"story not an array", `attempts = '{"t": 1}'`},
		{"attempt without a token", `attempts = '[{"c": 1}]'`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBackend(t, pool(t), nil)
			_, _, err := b.Claim(ctx, "s", "k", claimArgs("fp", epoch))
			require.NoError(t, err)
			mustExec(t, "UPDATE "+b.Table()+" SET "+tc.set)
			_, err = b.Get(ctx, "s", "k")
			require.ErrorIs(t, err, idem.ErrCorrupt)
			require.NotErrorIs(t, err, idem.ErrUnavailable)
			_, claimed, err := b.Claim(ctx, "s", "k", claimArgs("fp", epoch.Add(100*retention)))
			require.ErrorIs(t, err, idem.ErrCorrupt)
			require.False(t, claimed)
			// The brief read of Store.Begin checks the columns it reads,
			// and leaves any other row to the batch, which reads it whole.
			pgstore.SetReadFirst(b, "always")
			a := claimArgs("fp", epoch.Add(100*retention))
			a.Brief = true
			_, claimed, err = b.Claim(ctx, "s", "k", a)
			require.ErrorIs(t, err, idem.ErrCorrupt)
			require.False(t, claimed)
			require.ErrorIs(t, b.Scan(ctx, func(*idem.Record) bool { return true }), idem.ErrCorrupt)
		})
	}
}

// lockRow holds a row lock on (scope, key) in another session until the
// test ends or the returned function is called.
func lockRow(t *testing.T, b *pgstore.Backend, scope, key string) func() {
	t.Helper()
	tx, err := pool(t).Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "SELECT 1 FROM "+b.Table()+" WHERE scope = $1 AND key = $2 FOR UPDATE", scope, key)
	require.NoError(t, err)
	var once sync.Once
	unlock := func() { once.Do(func() { _ = tx.Rollback(ctx) }) }
	t.Cleanup(unlock)
	return unlock
}

func TestBackend_StatementTimeout_Unavailable(t *testing.T) {
	b := newBackend(t, pool(t), &pgstore.Options{StatementTimeout: 200 * time.Millisecond})
	rec, _, err := b.Claim(ctx, "s", "k", claimArgs("fp", epoch))
	require.NoError(t, err)
	lockRow(t, b, "s", "k")
	err = b.Complete(ctx, "s", "k", rec.Token, backend.Completion{Result: result("x"), At: epoch, ExpiresAt: epoch.Add(retention)})
	require.ErrorIs(t, err, idem.ErrUnavailable)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NotErrorIs(t, err, idem.ErrFenced)
}

func TestBackend_CallerCancel_NotUnavailable(t *testing.T) {
	b := newBackend(t, pool(t), nil)
	rec, _, err := b.Claim(ctx, "s", "k", claimArgs("fp", epoch))
	require.NoError(t, err)
	lockRow(t, b, "s", "k")
	cctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(100*time.Millisecond, cancel)
	err = b.Extend(cctx, "s", "k", rec.Token, epoch.Add(time.Hour))
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, idem.ErrUnavailable)

	dctx, cancel2 := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel2()
	err = b.Extend(dctx, "s", "k", rec.Token, epoch.Add(time.Hour))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, idem.ErrUnavailable, "a deadline means the storage did not answer in time")
}

// TestBackend_AdminShutdown_Unavailable ends the session serving a call, as
// pg_terminate_backend, a server shutdown or a failover does.
func TestBackend_AdminShutdown_Unavailable(t *testing.T) {
	cfg, err := pgxpool.ParseConfig(needServer(t))
	require.NoError(t, err)
	app := uniqueTable("app")
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer p.Close()
	b := newBackend(t, p, nil)
	rec, _, err := b.Claim(ctx, "s", "k", claimArgs("fp", epoch))
	require.NoError(t, err)
	unlock := lockRow(t, b, "s", "k")
	done := make(chan error, 1)
	go func() {
		done <- b.Complete(ctx, "s", "k", rec.Token, backend.Completion{Result: result("x"), At: epoch, ExpiresAt: epoch.Add(retention)})
	}()
	// Wait until the call is blocked on the lock, then end its session.
	for {
		var n int
		require.NoError(t, pool(t).QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE application_name = $1 AND wait_event_type = 'Lock'`, app).Scan(&n))
		if n > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	err = <-done
	require.ErrorIs(t, err, idem.ErrUnavailable)
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		require.Equal(t, "57P01", pe.Code) // admin_shutdown
	}
	unlock()
	got, err := b.Get(ctx, "s", "k")
	require.NoError(t, err, "the pool serves again once the session is gone")
	require.Equal(t, idem.StateInProgress, got.State, "the interrupted Complete did not happen")
}

// TestBackend_ConnectionLoss_Unavailable cuts the network between the
// backend and the server: every call reports unavailable, none claims or
// replays falsely, and the backend recovers once the network does.
func TestBackend_ConnectionLoss_Unavailable(t *testing.T) {
	px, url := newProxy(t)
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.ConnConfig.ConnectTimeout = 2 * time.Second
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer p.Close()
	b := newBackend(t, p, &pgstore.Options{StatementTimeout: 5 * time.Second})
	direct := newBackend(t, pool(t), &pgstore.Options{Table: tableName(b)})
	held, _, err := b.Claim(ctx, "s", "held", claimArgs("fp", epoch))
	require.NoError(t, err)

	px.cut()
	_, claimed, err := b.Claim(ctx, "s", "new", claimArgs("fp", epoch))
	require.ErrorIs(t, err, idem.ErrUnavailable)
	require.False(t, claimed)
	_, err = b.Get(ctx, "s", "held")
	require.ErrorIs(t, err, idem.ErrUnavailable)
	require.NotErrorIs(t, err, idem.ErrNotFound)
	err = b.Complete(ctx, "s", "held", held.Token, backend.Completion{Result: result("x"), At: epoch, ExpiresAt: epoch.Add(retention)})
	require.ErrorIs(t, err, idem.ErrUnavailable)
	require.NotErrorIs(t, err, idem.ErrFenced)
	_, err = b.Stale(ctx, epoch.Add(time.Hour), 10)
	require.ErrorIs(t, err, idem.ErrUnavailable)
	_, err = b.Reclaim(ctx, epoch.Add(time.Hour), 10)
	require.ErrorIs(t, err, idem.ErrUnavailable)

	// Through a Store, a request gets unavailable and its effect does not run.
	s := newStore(t, b, &idem.Options{SweepInterval: -1, Clock: idemtest.NewClock(epoch)})
	ran := false
	_, _, err = s.Do(ctx, idem.Request{Scope: "s", Key: "new", Fingerprint: "fp"}, func(context.Context) (idem.Result, error) {
		ran = true
		return idem.Result{}, nil
	})
	require.ErrorIs(t, err, idem.ErrUnavailable)
	require.False(t, ran)

	_, err = direct.Get(ctx, "s", "new")
	require.ErrorIs(t, err, idem.ErrNotFound, "no claim was made while cut off")
	got, err := direct.Get(ctx, "s", "held")
	require.NoError(t, err)
	require.Equal(t, idem.StateInProgress, got.State)

	px.restore()
	require.NoError(t, b.Complete(ctx, "s", "held", held.Token, backend.Completion{Result: result("x"), At: epoch, ExpiresAt: epoch.Add(retention)}))
	_, claimed, err = b.Claim(ctx, "s", "new", claimArgs("fp", epoch))
	require.NoError(t, err)
	require.True(t, claimed)
}

// FailoverSafe refuses a primary without a synchronous standby, naming the
// setting, and opens nothing; without it New opens on the same server.
func TestNew_FailoverSafe_RefusesAnAsynchronousPrimary(t *testing.T) {
	p := pool(t)
	_, err := pgstore.New(ctx, p, &pgstore.Options{Schema: server.schema, Table: uniqueTable("fs"), FailoverSafe: true})
	require.ErrorIs(t, err, pgstore.ErrNotFailoverSafe)
	require.Contains(t, err.Error(), "synchronous_standby_names")
	b, err := pgstore.New(ctx, p, &pgstore.Options{Schema: server.schema, Table: uniqueTable("fs")})
	require.NoError(t, err)
	require.NoError(t, b.Close())
}
