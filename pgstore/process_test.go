package pgstore_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/pgstore"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// These tests run real child processes (this test binary, re-executed with
// IDEM_PGSTORE_HELPER set) beside stores in the test process, all on one
// table, as the replicas of a tool server share one database.

// TestHelperProcess is the child's side. It does nothing in a normal run.
func TestHelperProcess(t *testing.T) {
	mode := os.Getenv(envHelper)
	if mode == "" {
		return
	}
	var err error
	switch mode {
	case "race":
		err = helperRace()
	case "hold":
		err = helperHold()
	case "nemesis":
		err = nemesisWorker()
	default:
		err = fmt.Errorf("unknown helper mode %q", mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(3)
	}
}

// helperEnv is what a child needs to find the table.
type helperEnv struct {
	table, ledger, name string
	keys                int
}

func (h helperEnv) environ(mode string) []string {
	return append(os.Environ(),
		envHelper+"="+mode,
		envURL+"="+server.url,
		"IDEM_PGSTORE_SCHEMA="+server.schema,
		"IDEM_PGSTORE_TABLE="+h.table,
		"IDEM_PGSTORE_LEDGER="+h.ledger,
		"IDEM_PGSTORE_NAME="+h.name,
		"IDEM_PGSTORE_KEYS="+strconv.Itoa(h.keys),
	)
}

func readHelperEnv() helperEnv {
	n, _ := strconv.Atoi(os.Getenv("IDEM_PGSTORE_KEYS"))
	return helperEnv{table: os.Getenv("IDEM_PGSTORE_TABLE"), ledger: os.Getenv("IDEM_PGSTORE_LEDGER"),
		name: os.Getenv("IDEM_PGSTORE_NAME"), keys: n}
}

// child is a running helper process.
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string // its stdout, line by line; closed at EOF
	stderr *bytes.Buffer
}

func startChild(t *testing.T, mode string, h helperEnv) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = h.environ(mode)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	c := &child{cmd: cmd, stdin: stdin, lines: make(chan string, 1024), stderr: &bytes.Buffer{}}
	cmd.Stderr = c.stderr
	require.NoError(t, cmd.Start())
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return c
}

// expect reads lines until one starts with prefix and returns it. Lines
// before it are handed to each.
func (c *child) expect(t *testing.T, prefix string, each func(string)) string {
	t.Helper()
	timeout := time.After(2 * time.Minute) // turns a hang into a failure
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				_ = c.cmd.Wait()
				t.Fatalf("child ended before %q: %v\n%s", prefix, c.cmd.ProcessState, c.stderr)
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
			if each != nil {
				each(l)
			}
		case <-timeout:
			t.Fatalf("child said no %q\n%s", prefix, c.stderr)
		}
	}
}

func createLedger(t *testing.T, table string) string {
	ledger := table + "_ledger"
	mustExec(t, "CREATE TABLE "+pgx.Identifier{server.schema, ledger}.Sanitize()+
		" (key text NOT NULL, executor text NOT NULL)")
	return ledger
}

func openHelperStore(h helperEnv, o *idem.Options) (*idem.Store, *pgxpool.Pool, error) {
	pool, err := pgxpool.New(context.Background(), server.url)
	if err != nil {
		return nil, nil, err
	}
	b, err := pgstore.New(context.Background(), pool, &pgstore.Options{Schema: server.schema, Table: h.table})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return idem.New(b, o), pool, nil
}

// raceKeys runs every key through s, all participants in the same order,
// and returns the body each key answered with and how often a key was
// found in progress. A key in progress goes to the back of the queue, so
// participants spread over the keys in lockstep and collide on them. The
// effect appends a row naming the executor to the ledger.
func raceKeys(ctx context.Context, s *idem.Store, pool *pgxpool.Pool, h helperEnv) (map[string]string, int, error) {
	ledger := pgx.Identifier{server.schema, h.ledger}.Sanitize()
	out := map[string]string{}
	var queue []string
	for i := range h.keys {
		queue = append(queue, fmt.Sprintf("key-%04d", i))
	}
	busy := 0
	for len(queue) > 0 {
		key := queue[0]
		queue = queue[1:]
		res, _, err := s.Do(ctx, idem.Request{Scope: "race", Key: key, Fingerprint: "fp"},
			func(ctx context.Context) (idem.Result, error) {
				if _, err := pool.Exec(ctx, "INSERT INTO "+ledger+" (key, executor) VALUES ($1, $2)", key, h.name); err != nil {
					return idem.Result{}, err
				}
				// An effect takes a moment, as a real one does: the others,
				// working down the same keys, meet its claim in progress
				// (without it one participant could run ahead of all the
				// others and no one would ever meet another's claim).
				time.Sleep(time.Millisecond)
				return idem.Result{Status: 200, Body: []byte(h.name)}, nil
			})
		if errors.Is(err, idem.ErrInProgress) && busy < 1000*h.keys {
			busy++
			queue = append(queue, key)
			if len(queue) == 1 {
				// Only this key is left, and its winner is still at it:
				// come back a moment later, as a client told 409 would.
				time.Sleep(100 * time.Microsecond)
			}
			continue
		}
		if err != nil {
			return nil, busy, fmt.Errorf("%s: %w", key, err)
		}
		out[key] = string(res.Body)
	}
	return out, busy, nil
}

func helperRace() error {
	h := readHelperEnv()
	s, pool, err := openHelperStore(h, &idem.Options{SweepInterval: -1})
	if err != nil {
		return err
	}
	defer pool.Close()
	defer s.Close()
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return err
	}
	got, busy, err := raceKeys(context.Background(), s, pool, h)
	if err != nil {
		return err
	}
	for k, v := range got {
		fmt.Printf("result %s %s\n", k, v)
	}
	fmt.Printf("done %d\n", busy)
	return nil
}

// TestCrossProcess_OneExecutionPerKey races stores in this process, each on
// a pool of its own, and two child processes on the same keys: each key's
// effect runs exactly once, and every participant gets its result.
func TestCrossProcess_OneExecutionPerKey(t *testing.T) {
	const keys, children, local = 200, 2, 3
	table := tableName(newBackend(t, pool(t), nil))
	ledger := createLedger(t, table)

	var kids []*child
	for i := range children {
		c := startChild(t, "race", helperEnv{table: table, ledger: ledger, name: fmt.Sprintf("child-%d", i), keys: keys})
		c.expect(t, "ready", nil)
		kids = append(kids, c)
	}
	results := map[string]map[string]string{} // participant -> key -> body
	busy := 0                                 // keys found in progress, by all
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, local)
	for i := range local {
		h := helperEnv{table: table, ledger: ledger, name: fmt.Sprintf("local-%d", i), keys: keys}
		p := newPool(t, 4)
		b, err := pgstore.New(ctx, p, &pgstore.Options{Schema: server.schema, Table: table})
		require.NoError(t, err)
		s := newStore(t, b, &idem.Options{SweepInterval: -1})
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			got, n, err := raceKeys(ctx, s, p, h)
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			busy += n
			results[h.name] = got
			mu.Unlock()
		}()
	}
	for _, c := range kids {
		_, err := io.WriteString(c.stdin, "go\n")
		require.NoError(t, err)
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i, c := range kids {
		got := map[string]string{}
		done := c.expect(t, "done", func(l string) {
			if f := strings.Fields(l); len(f) == 3 && f[0] == "result" {
				got[f[1]] = f[2]
			}
		})
		n, err := strconv.Atoi(strings.TrimPrefix(done, "done "))
		require.NoError(t, err)
		busy += n
		require.NoError(t, c.cmd.Wait(), "child: %s", c.stderr)
		results[fmt.Sprintf("child-%d", i)] = got
	}

	rows, err := pool(t).Query(ctx, "SELECT key, executor FROM "+pgx.Identifier{server.schema, ledger}.Sanitize())
	require.NoError(t, err)
	executor := map[string]string{}
	byWhom := map[string]int{}
	for rows.Next() {
		var k, e string
		require.NoError(t, rows.Scan(&k, &e))
		_, twice := executor[k]
		require.False(t, twice, "the effect of %s ran more than once", k)
		executor[k] = e
		byWhom[e]++
	}
	require.NoError(t, rows.Err())
	require.Len(t, executor, keys, "every key's effect ran")
	require.Len(t, results, children+local)
	for who, got := range results {
		require.Len(t, got, keys, who)
		for k, body := range got {
			require.Equal(t, executor[k], body, "%s got another result for %s than the one that ran", who, k)
		}
	}
	t.Logf("executions by participant: %v; keys found in progress: %d", byWhom, busy)
	require.Greater(t, busy, 0, "no participant ever met another's claim: there was no race")
}

// helperHold claims keys and dies holding them: for even keys (and the one
// run through Do, whose heartbeat keeps its lease alive until the process
// dies) the effect happened downstream first, for odd keys it did not.
func helperHold() error {
	h := readHelperEnv()
	s, pool, err := openHelperStore(h, &idem.Options{SweepInterval: -1, Lease: 2 * time.Second})
	if err != nil {
		return err
	}
	ctx := context.Background()
	ledger := pgx.Identifier{server.schema, h.ledger}.Sanitize()
	effect := func(key string) error {
		_, err := pool.Exec(ctx, "INSERT INTO "+ledger+" (key, executor) VALUES ($1, $2)", key, "effect-"+key)
		return err
	}
	for i := range h.keys {
		key := fmt.Sprintf("hold-%02d", i)
		c, _, err := s.Begin(ctx, idem.Request{Scope: "crash", Key: key, Fingerprint: "fp"})
		if err != nil {
			return err
		}
		if i%2 == 0 {
			if err := effect(key); err != nil {
				return err
			}
		}
		fmt.Printf("claimed %s %d\n", key, c.Token())
	}
	running := make(chan struct{})
	go func() {
		_, _, err := s.Do(ctx, idem.Request{Scope: "crash", Key: "hold-do", Fingerprint: "fp"},
			func(ctx context.Context) (idem.Result, error) {
				if err := effect("hold-do"); err != nil {
					return idem.Result{}, err
				}
				close(running)
				select {} // the process dies here
			})
		fmt.Fprintln(os.Stderr, "Do returned:", err)
		os.Exit(4)
	}()
	<-running
	fmt.Println("holding")
	// Wait for SIGKILL: the parent never closes stdin.
	_, _ = io.Copy(io.Discard, os.Stdin)
	return errors.New("stdin closed before the parent killed the process")
}

// TestCrash_KilledHolderIsRecovered kills a child holding claims with
// SIGKILL; another instance, whose Resolver reads the downstream ledger,
// recovers every claim through Sweep, and later requests get the right
// answers: a replay where the effect happened, a new run where it did not.
func TestCrash_KilledHolderIsRecovered(t *testing.T) {
	const keys = 10
	table := tableName(newBackend(t, pool(t), nil))
	ledger := createLedger(t, table)
	ledgerTable := pgx.Identifier{server.schema, ledger}.Sanitize()
	c := startChild(t, "hold", helperEnv{table: table, ledger: ledger, keys: keys})
	tokens := map[string]uint64{}
	c.expect(t, "holding", func(l string) {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "claimed" {
			tok, err := strconv.ParseUint(f[2], 10, 64)
			require.NoError(t, err)
			tokens[f[1]] = tok
		}
	})
	require.Len(t, tokens, keys)

	// While the child lives, its claims are in progress and nobody runs them.
	live := newStore(t, newBackend(t, newPool(t, 2), &pgstore.Options{Table: table}), &idem.Options{SweepInterval: -1})
	_, _, err := live.Do(ctx, idem.Request{Scope: "crash", Key: "hold-01", Fingerprint: "fp"},
		func(context.Context) (idem.Result, error) {
			t.Error("a held key ran again")
			return idem.Result{}, nil
		})
	require.True(t, errors.Is(err, idem.ErrInProgress) || errors.Is(err, idem.ErrOutcomeUnknown), "%v", err)

	require.NoError(t, c.cmd.Process.Signal(syscall.SIGKILL))
	err = c.cmd.Wait()
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee), "%v", err)
	require.Equal(t, syscall.SIGKILL, ee.Sys().(syscall.WaitStatus).Signal())

	// The recovering instance's clock reads a minute on: every lease the
	// child held (2 seconds, heartbeats included) has ended.
	clk := idemtest.NewClock(time.Now().Add(time.Minute))
	recovering := newPool(t, 4)
	resolver := idem.ResolverFunc(func(ctx context.Context, rec *idem.Record) (idem.Resolution, error) {
		var body string
		err := recovering.QueryRow(ctx, "SELECT executor FROM "+ledgerTable+" WHERE key = $1", rec.Key).Scan(&body)
		if errors.Is(err, pgx.ErrNoRows) {
			return idem.Resolution{Verdict: idem.VerdictNotCommitted}, nil
		}
		if err != nil {
			return idem.Resolution{}, err
		}
		return idem.Resolution{Verdict: idem.VerdictCommitted, Result: idem.Result{Status: 200, Body: []byte(body)}}, nil
	})
	b := newBackend(t, recovering, &pgstore.Options{Table: table})
	s := newStore(t, b, &idem.Options{SweepInterval: -1, Clock: clk, Lease: 2 * time.Second, Resolver: resolver})
	rep, err := s.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, idem.SweepReport{Stale: keys + 1, Committed: keys/2 + 1, NotCommitted: keys / 2}, rep)

	// A zombie holder's late write is fenced off.
	err = b.Complete(ctx, "crash", "hold-01", tokens["hold-01"], backend.Completion{Result: idem.Result{Body: []byte("late")}, At: clk.Now(), ExpiresAt: clk.Now().Add(time.Hour)})
	require.ErrorIs(t, err, idem.ErrFenced)

	check := func(key string, committed bool) {
		t.Helper()
		res, replayed, err := s.Do(ctx, idem.Request{Scope: "crash", Key: key, Fingerprint: "fp"},
			func(ctx context.Context) (idem.Result, error) {
				_, err := recovering.Exec(ctx, "INSERT INTO "+ledgerTable+" (key, executor) VALUES ($1, $2)", key, "rerun-"+key)
				return idem.Result{Status: 200, Body: []byte("rerun-" + key)}, err
			})
		require.NoError(t, err, key)
		rec, err := b.Get(ctx, "crash", key)
		require.NoError(t, err)
		if committed {
			require.True(t, replayed, "%s: the effect had happened, yet it ran again", key)
			require.Equal(t, "effect-"+key, string(res.Body))
			require.Equal(t, "committed", rec.Recovered)
			require.Equal(t, 1, rec.Claims)
		} else {
			require.False(t, replayed, "%s: the effect had not happened, yet it was not run", key)
			require.Equal(t, "rerun-"+key, string(res.Body))
			require.Equal(t, 2, rec.Claims, "%s: the released claim's story goes on", key)
		}
	}
	for i := range keys {
		check(fmt.Sprintf("hold-%02d", i), i%2 == 0)
	}
	check("hold-do", true)

	var doubles int
	require.NoError(t, pool(t).QueryRow(ctx, "SELECT count(*) FROM (SELECT key FROM "+ledgerTable+
		" GROUP BY key HAVING count(*) <> 1) d").Scan(&doubles))
	require.Zero(t, doubles, "some effect ran twice or never")
	var n int
	require.NoError(t, pool(t).QueryRow(ctx, "SELECT count(*) FROM "+ledgerTable).Scan(&n))
	require.Equal(t, keys+1, n)
}
