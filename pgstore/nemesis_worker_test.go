package pgstore_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/pgstore"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The nemesis's worker is this test binary re-executed (TestHelperProcess,
// mode "nemesis"): 8 goroutines racing the other workers on shared keys,
// each effect an INSERT into the ledger table, until its stdin closes. It
// reports on stdout, one line each:
//
//	ack KEY BODY          Do returned this result without error
//	eff KEY TOKEN FN CLASS [ERROR]  how a Do that ran the effect ended:
//	                      FN is fn_ok (the write succeeded) or fn_err
//	stat CLASS=N ...      the counts so far, every 200 ms and at the end
//	error TEXT            the first few errors of no known class

// Nemesis modes: how the worker runs its effects.
const (
	modeTx    = "tx"    // idem.DoTx: the INSERT commits with the completion
	modePlain = "plain" // Store.Do: the INSERT commits on its own, unfenced
)

const (
	nemesisScope      = "nemesis"
	nemesisGoroutines = 8
	// keysPerSlot keys are new every slotLen of wall time, the same for
	// every worker: the goroutines of all workers collide on them.
	keysPerSlot = 16
	slotLen     = 500 * time.Millisecond
	// oldSlots: one Do in three goes to a key of one of the last oldSlots
	// slots, where it meets replays, claims held by paused workers and
	// their recovery.
	oldSlots = 24
)

// nemesisConfig is what a worker reads from its environment.
type nemesisConfig struct {
	mode   string
	schema string // on the nemesis's own cluster
	table  string // records table, unquoted, in schema
	ledger string // quoted, schema-qualified
	name   string // executor name in the ledger: worker and incarnation
	lease  time.Duration
	grace  time.Duration // Options.RecoveryGrace; 0 for the default
}

func (c nemesisConfig) environ(url string) []string {
	return append(os.Environ(),
		envHelper+"=nemesis",
		envURL+"="+url,
		"IDEM_PGSTORE_SCHEMA="+c.schema,
		"IDEM_PGSTORE_TABLE="+c.table,
		"IDEM_PGSTORE_LEDGER="+c.ledger,
		"IDEM_PGSTORE_NAME="+c.name,
		"IDEM_NEMESIS_MODE="+c.mode,
		"IDEM_NEMESIS_LEASE="+c.lease.String(),
		"IDEM_NEMESIS_GRACE="+c.grace.String(),
	)
}

func readNemesisConfig() (nemesisConfig, error) {
	lease, err := time.ParseDuration(os.Getenv("IDEM_NEMESIS_LEASE"))
	if err != nil {
		return nemesisConfig{}, err
	}
	grace, err := time.ParseDuration(os.Getenv("IDEM_NEMESIS_GRACE"))
	if err != nil {
		return nemesisConfig{}, err
	}
	return nemesisConfig{grace: grace, mode: os.Getenv("IDEM_NEMESIS_MODE"), schema: os.Getenv("IDEM_PGSTORE_SCHEMA"), table: os.Getenv("IDEM_PGSTORE_TABLE"),
		ledger: os.Getenv("IDEM_PGSTORE_LEDGER"), name: os.Getenv("IDEM_PGSTORE_NAME"), lease: lease}, nil
}

// ledgerResolver answers for a stale claim by looking its key up in the
// ledger: a row means the effect happened, and its result is the one the
// holder would have saved.
func ledgerResolver(pool *pgxpool.Pool, ledger string) idem.Resolver {
	return idem.ResolverFunc(func(ctx context.Context, rec *idem.Record) (idem.Resolution, error) {
		var executor string
		var token int64
		err := pool.QueryRow(ctx, "SELECT executor, token FROM "+ledger+" WHERE key = $1 ORDER BY token LIMIT 1",
			rec.Key).Scan(&executor, &token)
		if errors.Is(err, pgx.ErrNoRows) {
			return idem.Resolution{Verdict: idem.VerdictNotCommitted}, nil
		}
		if err != nil {
			return idem.Resolution{}, err
		}
		return idem.Resolution{Verdict: idem.VerdictCommitted, Result: effectResult(executor, uint64(token))}, nil
	})
}

func effectResult(executor string, token uint64) idem.Result {
	return idem.Result{Status: 200, Body: []byte(executor + "/" + strconv.FormatUint(token, 10))}
}

// errorClass names an error returned by Do, for the counts.
func errorClass(err error) string {
	var late *idem.LateCompletionError
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, idem.ErrRanTwice):
		return "ran_twice"
	case errors.As(err, &late):
		return "late"
	case errors.Is(err, idem.ErrInProgress):
		return "in_progress"
	case errors.Is(err, idem.ErrOutcomeUnknown):
		return "outcome_unknown"
	case errors.Is(err, idem.ErrOutcomeNotRecorded):
		return "not_recorded"
	case errors.Is(err, idem.ErrFenced):
		return "fenced"
	case errors.Is(err, idem.ErrUnavailable):
		return "unavailable"
	default:
		return "error"
	}
}

// workerOut serialises the worker's stdout lines and keeps its counts.
type workerOut struct {
	mu     sync.Mutex // guards w and counts
	w      *bufio.Writer
	counts map[string]int64
}

func (o *workerOut) line(format string, args ...any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	fmt.Fprintf(o.w, format+"\n", args...)
	_ = o.w.Flush()
}

// count adds one to class and returns its count.
func (o *workerOut) count(class string) int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.counts[class]++
	return o.counts[class]
}

func (o *workerOut) stat() {
	o.mu.Lock()
	classes := make([]string, 0, len(o.counts))
	for c := range o.counts {
		classes = append(classes, c)
	}
	sort.Strings(classes)
	var b strings.Builder
	b.WriteString("stat")
	for _, c := range classes {
		fmt.Fprintf(&b, " %s=%d", c, o.counts[c])
	}
	o.mu.Unlock()
	o.line("%s", b.String())
}

// openNemesisStore connects, retrying while the server is down or the
// path to it is held: a worker restarted after a kill may meet either.
func openNemesisStore(cfg nemesisConfig) (*idem.Store, *pgxpool.Pool, error) {
	pcfg, err := pgxpool.ParseConfig(server.url)
	if err != nil {
		return nil, nil, err
	}
	// Each goroutine's claim, its heartbeat, its transaction and the
	// background sweep and resolver each take a connection at times.
	pcfg.MaxConns = 3*nemesisGoroutines + 4
	pcfg.ConnConfig.ConnectTimeout = 2 * time.Second
	pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	if err != nil {
		return nil, nil, err
	}
	var b *pgstore.Backend
	for try := 0; ; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		b, err = pgstore.New(ctx, pool, &pgstore.Options{Schema: cfg.schema, Table: cfg.table,
			StatementTimeout: 5 * time.Second})
		cancel()
		if err == nil {
			break
		}
		if try == 60 {
			pool.Close()
			return nil, nil, err
		}
		time.Sleep(500 * time.Millisecond)
	}
	policy := idem.DefaultPolicy
	if cfg.mode == modePlain {
		// An error from the unfenced INSERT leaves its fate unknown (the
		// statement may have committed and its answer been lost): hold the
		// claim for the Resolver, as the Policy's documentation advises,
		// rather than release it to run again at once.
		policy = func(res idem.Result, err error) idem.Decision {
			if err != nil {
				return idem.DecisionHold
			}
			return idem.DefaultPolicy(res, err)
		}
	}
	s := idem.New(b, &idem.Options{
		Policy:        policy,
		Lease:         cfg.lease,
		RecoveryGrace: cfg.grace,
		Retention:     24 * time.Hour,
		SweepInterval: 250 * time.Millisecond,
		Resolver:      ledgerResolver(pool, cfg.ledger),
		Owner:         cfg.name,
	})
	return s, pool, nil
}

func nemesisWorker() error {
	cfg, err := readNemesisConfig()
	if err != nil {
		return err
	}
	s, pool, err := openNemesisStore(cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	out := &workerOut{w: bufio.NewWriter(os.Stdout), counts: map[string]int64{}}
	var stop atomic.Bool
	go func() {
		// The parent closes stdin to end the run; so does its death.
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		stop.Store(true)
	}()
	out.line("ready")
	var wg sync.WaitGroup
	for g := range nemesisGoroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(os.Getpid()), uint64(g)))
			for !stop.Load() {
				nemesisCall(s, pool, cfg, out, rng)
			}
		}()
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for !stop.Load() {
		<-tick.C
		out.stat()
	}
	wg.Wait()
	_ = s.Close()
	out.stat()
	out.line("bye")
	return nil
}

// nemesisKey picks the key of this call: most go to the current slot's
// keys, some to older ones.
func nemesisKey(rng *rand.Rand) string {
	slot := time.Now().UnixNano() / int64(slotLen)
	if rng.IntN(3) == 0 {
		slot -= int64(rng.IntN(oldSlots))
	}
	return fmt.Sprintf("s%d-%02d", slot, rng.IntN(keysPerSlot))
}

// nemesisCall runs one Do on a key and reports it.
func nemesisCall(s *idem.Store, pool *pgxpool.Pool, cfg nemesisConfig, out *workerOut, rng *rand.Rand) {
	key := nemesisKey(rng)
	req := idem.Request{Scope: nemesisScope, Key: key, Fingerprint: "fp"}
	ran, fnErr := false, error(nil)
	var token uint64
	insert := "INSERT INTO " + cfg.ledger + " (key, executor, token) VALUES ($1, $2, $3)"
	// effect writes the ledger row with exec. It takes a few milliseconds
	// on both sides of its write, so that pauses and held traffic strike
	// between claim, write and completion; once the write succeeded it
	// reports success, as an effect that happened must.
	effect := func(ctx context.Context, exec func(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)) (idem.Result, error) {
		c, _ := idem.ClaimFromContext(ctx)
		ran, token = true, c.Token()
		t := time.NewTimer(time.Duration(rng.IntN(20000)) * time.Microsecond)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			fnErr = ctx.Err()
			return idem.Result{}, fnErr
		}
		if _, fnErr = exec(ctx, insert, key, cfg.name, int64(token)); fnErr != nil {
			return idem.Result{}, fnErr
		}
		<-time.After(time.Duration(rng.IntN(20000)) * time.Microsecond)
		return effectResult(cfg.name, token), nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var res idem.Result
	var err error
	if cfg.mode == modeTx {
		res, _, err = idem.DoTx(ctx, s, req, func(ctx context.Context, tx pgx.Tx) (idem.Result, error) {
			return effect(ctx, tx.Exec)
		})
	} else {
		res, _, err = s.Do(ctx, req, func(ctx context.Context) (idem.Result, error) {
			return effect(ctx, pool.Exec)
		})
	}
	class := errorClass(err)
	out.count("calls")
	if out.count(class) <= 3 && class == "error" {
		out.line("error %s", oneLine(err))
	}
	if ran {
		out.count("ran")
		fn := "fn_ok"
		if fnErr != nil {
			fn = "fn_err"
		}
		out.line("eff %s %d %s %s %s", key, token, fn, class, oneLine(err))
	}
	if err == nil {
		out.line("ack %s %s", key, res.Body)
	}
}

func oneLine(err error) string {
	if err == nil {
		return ""
	}
	return strings.ReplaceAll(err.Error(), "\n", " / ")
}
