package redisstore_test

// The crash test kills redis-server under load. Several child processes
// (this test binary, run again with crashEnvChild set) call Do on one
// sequence of keys, all of them on each key, so that one runs the effect
// and the others wait and replay; the parent SIGKILLs the server every
// second or two and restarts it on its files. An effect appends "key
// token" to its child's ledger file and syncs it before returning; the
// Resolver answers from the ledgers, so a claim whose completion the kill
// cut off is saved by recovery. A child prints "ack key body unixnanos"
// for every result Do returned. At the end the parent reads every
// acknowledged key back: a key that is not done with the body acknowledged
// is lost, and a key with two lines in the ledgers ran twice.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/redisstore"
)

const (
	crashEnvChild  = "IDEM_REDIS_CRASH_CHILD"  // the child's name
	crashEnvURL    = "IDEM_REDIS_CRASH_URL"    // the server
	crashEnvPrefix = "IDEM_REDIS_CRASH_PREFIX" // the store's prefix
	crashEnvLedger = "IDEM_REDIS_CRASH_LEDGER" // the directory of the ledgers
	crashEnvFast   = "IDEM_REDIS_CRASH_FAST"   // "1": open with Durability Fast
	crashScope     = "crash"
)

// TestCrash_Child is a crash child's side; it returns at once in a normal
// run.
func TestCrash_Child(t *testing.T) {
	name := os.Getenv(crashEnvChild)
	if name == "" {
		return
	}
	if err := crashChild(name); err != nil {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		os.Exit(3)
	}
	os.Exit(0)
}

// ledgerResolver answers from every child's ledger: committed when a line
// holds the claim's key and token.
func ledgerResolver(dir string) idem.ResolverFunc {
	return func(_ context.Context, rec *idem.Record) (idem.Resolution, error) {
		lines, err := readLedgers(dir)
		if err != nil {
			return idem.Resolution{}, err
		}
		for _, tok := range lines[rec.Key] {
			if tok == rec.Token {
				return idem.Resolution{Verdict: idem.VerdictCommitted, Result: crashResult(rec.Key, tok)}, nil
			}
		}
		return idem.Resolution{Verdict: idem.VerdictNotCommitted}, nil
	}
}

func crashResult(key string, token uint64) idem.Result {
	return idem.Result{Status: 200, Body: []byte(key + ":" + strconv.FormatUint(token, 10))}
}

// readLedgers returns the tokens of every effect of every key.
func readLedgers(dir string) (map[string][]uint64, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.ledger"))
	if err != nil {
		return nil, err
	}
	out := map[string][]uint64{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		for _, l := range strings.Split(string(b), "\n") {
			key, tok, ok := strings.Cut(l, " ")
			if !ok {
				continue // a line a kill cut short is not there
			}
			n, err := strconv.ParseUint(tok, 10, 64)
			if err != nil {
				continue
			}
			out[key] = append(out[key], n)
		}
	}
	return out, nil
}

func crashChild(name string) error {
	ctx := context.Background()
	dir := os.Getenv(crashEnvLedger)
	opts := &redisstore.Options{Prefix: os.Getenv(crashEnvPrefix)}
	if os.Getenv(crashEnvFast) == "1" {
		opts.Durability = backend.Fast
	}
	b, err := redisstore.Open(ctx, os.Getenv(crashEnvURL), opts)
	if err != nil {
		return err
	}
	store := idem.New(b, &idem.Options{Lease: time.Second, Retention: time.Hour,
		Resolver: ledgerResolver(dir), Owner: name})
	defer store.Close()
	ledger, err := os.OpenFile(filepath.Join(dir, name+".ledger"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer ledger.Close()
	var stop sync.WaitGroup
	stop.Add(1)
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); stop.Done() }()
	stopped := make(chan struct{})
	go func() { stop.Wait(); close(stopped) }()
	effect := func(ctx context.Context) (idem.Result, error) {
		c, _ := idem.ClaimFromContext(ctx)
		if _, err := fmt.Fprintf(ledger, "%s %d\n", c.Key(), c.Token()); err != nil {
			return idem.Result{}, err
		}
		if err := ledger.Sync(); err != nil {
			return idem.Result{}, err
		}
		return crashResult(c.Key(), c.Token()), nil
	}
	for n := 0; ; n++ {
		key := fmt.Sprintf("k-%06d", n)
		for {
			select {
			case <-stopped:
				return nil
			default:
			}
			res, _, err := store.Do(ctx, idem.Request{Scope: crashScope, Key: key, Fingerprint: "fp"}, effect)
			if err == nil {
				fmt.Printf("ack %s %s %d\n", key, res.Body, time.Now().UnixNano())
				break
			}
			if !errors.Is(err, idem.ErrInProgress) {
				fmt.Printf("err %s %v\n", key, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// crashAck is one result a child acknowledged.
type crashAck struct {
	body string
	at   time.Time
}

// crashRun is what one run found.
type crashRun struct {
	kills, acked, lost, twice, errs int
	recovered                       int // acknowledged results saved by recovery
	killedAt                        []time.Time
	lostAt                          []time.Time // when each lost result was acknowledged
}

func runCrash(t *testing.T, settings []string, fast bool, d time.Duration, children int) crashRun {
	srv := startServer(t, settings...)
	dir := t.TempDir()
	prefix := fmt.Sprintf("crash%d", os.Getpid())
	var run crashRun
	var mu sync.Mutex               // guards acks and run.errs, written by the readers
	acks := map[string][]crashAck{} // by key: every child's
	var readers sync.WaitGroup
	var cmds []*exec.Cmd
	var stdins []io.WriteCloser
	for i := range children {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrash_Child$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashEnvChild+"=c"+strconv.Itoa(i), crashEnvURL+"="+srv.URL(),
			crashEnvPrefix+"="+prefix, crashEnvLedger+"="+dir)
		if fast {
			cmd.Env = append(cmd.Env, crashEnvFast+"=1")
		}
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if cmd.ProcessState == nil {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			}
		})
		cmds, stdins = append(cmds, cmd), append(stdins, stdin)
		readers.Add(1)
		go func() {
			defer readers.Done()
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				f := strings.Fields(sc.Text())
				mu.Lock()
				switch {
				case len(f) == 4 && f[0] == "ack":
					ns, _ := strconv.ParseInt(f[3], 10, 64)
					acks[f[1]] = append(acks[f[1]], crashAck{f[2], time.Unix(0, ns)})
				case len(f) > 0 && f[0] == "err":
					run.errs++
				}
				mu.Unlock()
			}
		}()
	}

	end := time.Now().Add(d)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))
	for time.Now().Before(end) {
		time.Sleep(time.Second + time.Duration(rng.Int64N(int64(time.Second))))
		srv.Kill()
		run.kills++
		run.killedAt = append(run.killedAt, time.Now())
		time.Sleep(100 * time.Millisecond)
		if err := srv.Restart(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	// Let the children settle what the last kill left, then stop them.
	time.Sleep(3 * time.Second)
	for _, in := range stdins {
		_ = in.Close()
	}
	for _, cmd := range cmds {
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("child: %v", err)
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("a child did not stop")
		}
	}
	readers.Wait()

	b, err := redisstore.Open(context.Background(), srv.URL(), &redisstore.Options{Prefix: prefix, Durability: backend.Fast})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	run.acked = len(acks)
	// A key is lost when what is stored is not done with every body
	// acknowledged for it (two bodies: a result was lost and run again).
	for key, as := range acks {
		rec, err := b.Get(context.Background(), crashScope, key)
		ok := err == nil && rec.State == backend.StateDone && rec.Result != nil
		for _, a := range as {
			if !ok || string(rec.Result.Body) != a.body {
				ok = false
				run.lostAt = append(run.lostAt, a.at)
			}
		}
		if !ok {
			run.lost++
		} else if rec.Recovered != "" {
			run.recovered++
		}
	}
	ledgers, err := readLedgers(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, toks := range ledgers {
		if len(toks) > 1 {
			run.twice++
		}
	}
	return run
}

// crashDuration is how long each run kills the server: 15 seconds, or
// IDEM_REDIS_CRASH (a Go duration) for longer runs.
func crashDuration(t *testing.T) time.Duration {
	if s := os.Getenv("IDEM_REDIS_CRASH"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("IDEM_REDIS_CRASH=%q: %v", s, err)
		}
		return d
	}
	return 12 * time.Second
}

// report logs a run's figures.
func (r crashRun) report(t *testing.T, name string) {
	t.Logf("%s: %d kills, %d results acknowledged (%d saved by recovery), %d lost, %d effects twice, %d failed calls retried",
		name, r.kills, r.acked, r.recovered, r.lost, r.twice, r.errs)
	if r.acked == 0 || r.kills == 0 {
		t.Fatalf("nothing tested: %d kills, %d acknowledged", r.kills, r.acked)
	}
}

// TestCrash_AppendfsyncAlways: with a Durable store on appendfsync always,
// no acknowledged result is lost and no effect runs twice.
func TestCrash_AppendfsyncAlways(t *testing.T) {
	if testing.Short() {
		t.Skip("kills redis-server for seconds")
	}
	needServer(t)
	r := runCrash(t, nil, false, crashDuration(t), 3)
	r.report(t, "appendfsync always")
	if r.lost != 0 || r.twice != 0 {
		t.Fatalf("%d acknowledged results lost, %d effects ran twice", r.lost, r.twice)
	}
}

// TestCrash_AppendfsyncEverysec: a Fast store on appendfsync everysec.
// Redis writes its file before it answers unless an fsync is slow, so a
// kill of the server (the machine stays up) loses at most the writes it
// postponed, up to two seconds' worth: every loss found must fall in the
// two seconds before a kill (with half a second of slack for scheduling).
func TestCrash_AppendfsyncEverysec(t *testing.T) {
	if testing.Short() {
		t.Skip("kills redis-server for seconds")
	}
	needServer(t)
	r := runCrash(t, []string{"appendfsync everysec"}, true, crashDuration(t), 3)
	r.report(t, "appendfsync everysec")
	sort.Slice(r.killedAt, func(i, j int) bool { return r.killedAt[i].Before(r.killedAt[j]) })
	for _, at := range r.lostAt {
		i := sort.Search(len(r.killedAt), func(i int) bool { return !r.killedAt[i].Before(at) })
		if i == len(r.killedAt) || r.killedAt[i].Sub(at) > 2500*time.Millisecond {
			t.Errorf("a result acknowledged at %v was lost, outside the window before any kill", at)
		}
	}
}

// TestCrash_AppendonlyOff: a Fast store on a server without the
// append-only file (and without snapshots) loses everything at every kill.
// The check must see it: this run proves the checker finds losses and
// effects that ran twice, as the other two runs rely on.
func TestCrash_AppendonlyOff(t *testing.T) {
	if testing.Short() {
		t.Skip("kills redis-server for seconds")
	}
	needServer(t)
	r := runCrash(t, []string{"appendonly no"}, true, crashDuration(t)/2, 3)
	r.report(t, "appendonly no")
	if r.lost == 0 || r.twice == 0 {
		t.Fatalf("the check found no loss (%d lost, %d twice) on a server that keeps nothing", r.lost, r.twice)
	}
}
