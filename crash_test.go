package idem_test

// The crash tests kill real processes. The test binary runs itself again as
// a child (TestCrash_Child, selected with -test.run and an environment
// variable), the child works on a store and a downstream ledger, the parent
// kills it with SIGKILL at a random moment, reopens the store with a
// Resolver that reads the ledger, recovers, and checks that no effect ran
// twice and that every effect that ran replays its own result.
//
// The ledger is the downstream truth: an effect is one line "key token
// amount\n" appended with O_APPEND and synced before the result is saved.
// A kill can therefore fall between the effect and the save; the Resolver
// finds the claim's token in the ledger and answers VerdictCommitted with the
// result the child would have saved.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/idemtest"
	"github.com/stretchr/testify/require"
)

// The environment of a crash child. A process without crashEnvMode is a
// parent, and TestCrash_Child returns at once in it.
const (
	crashEnvMode   = "IDEM_CRASH_CHILD"  // "work" or "hold"
	crashEnvDir    = "IDEM_CRASH_DIR"    // the store directory
	crashEnvLedger = "IDEM_CRASH_LEDGER" // the downstream ledger file
	crashEnvEvents = "IDEM_CRASH_EVENTS" // the child's notes: failures, holds, claims, violations
	crashEnvKeys   = "IDEM_CRASH_KEYS"   // "first,count": the key window of a work child
	crashEnvSeed   = "IDEM_CRASH_SEED"   // the child's random seed; in the parent, overrides the seed
	crashEnvCycles = "IDEM_CRASH_CYCLES" // in the parent, overrides the number of kill cycles
)

// The progress pipe is the child's fd 3. The child writes one byte per
// milestone, so the parent can kill it at a chosen point of its stream
// rather than after a guessed delay.
const (
	crashOpened   = 'o' // the store is open
	crashEffected = 'e' // an effect's ledger line is synced (its result is not saved yet)
	crashHolding  = 'r' // a hold child holds all its claims
	crashDone     = 'd' // a work child finished and closed the store
)

const (
	crashScope       = "crash"
	crashFingerprint = "crash-v1"
	// crashLease is the children's lease: short, so that Do's heartbeat
	// runs. Children have no Resolver, so a lease that ends while its
	// holder lives (a slow machine) yields ErrOutcomeUnknown to the other
	// goroutines and never a second run.
	crashLease = 300 * time.Millisecond
	// Each cycle's child works on crashWindow keys starting crashStride
	// after the previous child's: most keys are retried by three children,
	// as agents retry across restarts.
	crashStride  = 8
	crashWindow  = 24
	crashWorkers = 4
	// crashHangGuard is not an assertion on speed: it only turns a child
	// that stopped making progress (a deadlock) into a failure that shows
	// its goroutines, instead of a test timeout that shows nothing of it.
	crashHangGuard = time.Minute
)

var errCrashEffect = errors.New("crash test: effect failed downstream")

func crashKey(i int) string { return fmt.Sprintf("key-%04d", i) }

func crashIndex(key string) (int, bool) {
	n, err := strconv.Atoi(strings.TrimPrefix(key, "key-"))
	return n, err == nil && strings.HasPrefix(key, "key-")
}

// crashAmount is what key i's effect books; the parent checks it to tell a
// whole ledger line from a torn one.
func crashAmount(i int) int { return 100 + i }

// Doomed keys fail on every attempt; flaky keys fail on half of them.
func crashDoomed(i int) bool { return i%16 == 3 }
func crashFlaky(i int) bool  { return i%4 == 1 }

// crashResult is the result a child saves for key's effect under token,
// and so the one the Resolver answers for it.
func crashResult(key string, token uint64) idem.Result {
	return idem.Result{Status: 200, Body: []byte(key + ":" + strconv.FormatUint(token, 10))}
}

func crashRequest(key string) idem.Request {
	return idem.Request{Scope: crashScope, Key: key, Fingerprint: crashFingerprint}
}

// TestCrash_Child is the body of the child processes of the crash tests. It
// returns at once unless the parent started it.
func TestCrash_Child(t *testing.T) {
	switch os.Getenv(crashEnvMode) {
	case "":
		return
	case "work":
		crashWork(t)
	case "hold":
		crashHold(t)
	default:
		t.Fatalf("unknown %s=%q", crashEnvMode, os.Getenv(crashEnvMode))
	}
}

// crashChildEnv is what every child opens.
type crashChildEnv struct {
	store      *idem.Store
	ledgerPath string
	ledger     *os.File
	events     *os.File
	progress   *os.File
}

func openCrashChild(t *testing.T) *crashChildEnv {
	e := &crashChildEnv{ledgerPath: os.Getenv(crashEnvLedger), progress: os.NewFile(3, "crash-progress")}
	var err error
	e.ledger, err = os.OpenFile(e.ledgerPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	e.events, err = os.OpenFile(os.Getenv(crashEnvEvents), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	e.store, err = idem.Open(os.Getenv(crashEnvDir), &idem.Options{
		Durability:    idem.Durable,
		Lease:         crashLease,
		SweepInterval: 50 * time.Millisecond, // the background sweep runs beside the traffic
		CloseTimeout:  5 * time.Second,
		Logger:        slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatal(err)
	}
	e.mark(crashOpened)
	return e
}

func (e *crashChildEnv) mark(b byte) { _, _ = e.progress.Write([]byte{b}) }

// note appends one line to the events file. The file is not synced: only
// the process dies, and the page cache keeps what it wrote.
func (e *crashChildEnv) note(format string, args ...any) {
	_, _ = fmt.Fprintf(e.events, format+"\n", args...)
}

func (e *crashChildEnv) violation(t *testing.T, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	e.note("violation %s", msg)
	t.Errorf("violation: %s", msg)
}

// crashWork is a work child: crashWorkers goroutines go twice over the key
// window in their own random orders, claiming, running effects and saving
// results, until the parent kills the process or the work is done.
func crashWork(t *testing.T) {
	var first, count int
	if _, err := fmt.Sscanf(os.Getenv(crashEnvKeys), "%d,%d", &first, &count); err != nil {
		t.Fatalf("%s: %v", crashEnvKeys, err)
	}
	seed, err := strconv.ParseUint(os.Getenv(crashEnvSeed), 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", crashEnvSeed, err)
	}
	e := openCrashChild(t)
	var wg sync.WaitGroup
	for g := range crashWorkers {
		rng := rand.New(rand.NewPCG(seed, uint64(g)))
		wg.Go(func() {
			for range 2 {
				for _, j := range rng.Perm(count) {
					e.attempt(t, rng, first+j)
				}
			}
		})
	}
	wg.Wait()
	if err := e.store.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	e.mark(crashDone)
}

// attempt makes one request for key i, through Do or through Begin and
// Complete (sometimes Hold), as a retrying agent would.
func (e *crashChildEnv) attempt(t *testing.T, rng *rand.Rand, i int) {
	ctx := context.Background()
	key := crashKey(i)
	fail := crashDoomed(i) || (crashFlaky(i) && rng.IntN(2) == 0)
	if rng.IntN(5) < 3 {
		res, replayed, err := e.store.Do(ctx, crashRequest(key), func(ctx context.Context) (idem.Result, error) {
			// Do does not hand fn its claim; the record names it, and no
			// one else can change it while this claim is held.
			rec, err := e.store.Get(ctx, crashScope, key)
			if err != nil {
				e.violation(t, "get %s inside Do: %v", key, err)
				return idem.Result{}, err
			}
			if rec.State != idem.StateInProgress {
				e.violation(t, "Do runs %s but its record is %s", key, rec.State)
			}
			return e.effect(t, i, rec.Token, fail)
		})
		switch {
		case err == nil && replayed:
			e.checkReplay(t, key, res)
		case err == nil, err == errCrashEffect:
			// Ran and saved, or failed and released by the default policy
			// (Do returns fn's error itself when the release succeeded).
		default:
			e.refused(t, "do", key, err)
		}
		return
	}
	c, saved, err := e.store.Begin(ctx, crashRequest(key))
	switch {
	case err != nil:
		e.refused(t, "begin", key, err)
	case saved != nil:
		e.checkReplay(t, key, *saved)
	default:
		res, err := e.effect(t, i, c.Token(), fail)
		switch {
		case err != nil:
			err = c.Release(ctx, err.Error())
		case rng.IntN(16) == 0:
			// An ambiguous outcome (a downstream timeout after the write):
			// the claim waits for recovery, which finds the effect.
			e.note("hold %s %d", key, c.Token())
			err = c.Hold(ctx)
		default:
			err = c.Complete(ctx, res)
		}
		if err != nil {
			e.violation(t, "end claim %s/%d: %v", key, c.Token(), err)
		}
	}
}

// effect is the downstream action of key i under token: it books one
// ledger line, synced, or fails without booking anything.
func (e *crashChildEnv) effect(t *testing.T, i int, token uint64, fail bool) (idem.Result, error) {
	key := crashKey(i)
	// The claim is the lock: a ledger line for the key already means an
	// earlier claim's effect happened, and this claim must not exist.
	if lines, err := readCrashLedger(e.ledgerPath, true); err != nil {
		e.violation(t, "read ledger: %v", err)
	} else if prev := lines[key]; len(prev) > 0 {
		e.violation(t, "claim %s/%d granted after the effect of token %d was booked", key, token, prev[0].token)
	}
	if fail {
		e.note("fail %s %d", key, token)
		return idem.Result{}, errCrashEffect
	}
	line := fmt.Sprintf("%s %d %d\n", key, token, crashAmount(i))
	if _, err := e.ledger.WriteString(line); err != nil {
		e.violation(t, "append ledger: %v", err)
		return idem.Result{}, err
	}
	if err := e.ledger.Sync(); err != nil {
		e.violation(t, "sync ledger: %v", err)
		return idem.Result{}, err
	}
	e.mark(crashEffected)
	return crashResult(key, token), nil
}

func (e *crashChildEnv) checkReplay(t *testing.T, key string, res idem.Result) {
	if res.Status != 200 || !strings.HasPrefix(string(res.Body), key+":") || res.Error != "" {
		e.violation(t, "replay of %s is %d %q %q", key, res.Status, res.Body, res.Error)
	}
}

// refused accepts the refusals a retrying agent meets (another goroutine
// holds the key, or a held claim awaits recovery) and reports the rest.
func (e *crashChildEnv) refused(t *testing.T, op, key string, err error) {
	if !errors.Is(err, idem.ErrInProgress) && !errors.Is(err, idem.ErrOutcomeUnknown) {
		e.violation(t, "%s %s: %v", op, key, err)
	}
}

// crashHold is a hold child: it claims a few keys with Begin and one with a
// Do whose effect never returns (its heartbeat keeps the lease alive), then
// signals and waits to be killed.
func crashHold(t *testing.T) {
	e := openCrashChild(t)
	ctx := context.Background()
	for i := range crashHeld - 1 {
		key := crashHeldKey(i)
		c, _, err := e.store.Begin(ctx, crashRequest(key))
		if err != nil || c == nil {
			t.Fatalf("begin %s: claim %v, %v", key, c, err)
		}
		e.note("claim %s %d", key, c.Token())
	}
	running := make(chan struct{})
	go func() {
		key := crashHeldKey(crashHeld - 1)
		_, _, err := e.store.Do(ctx, crashRequest(key), func(ctx context.Context) (idem.Result, error) {
			rec, err := e.store.Get(ctx, crashScope, key)
			if err != nil {
				return idem.Result{}, err
			}
			e.note("claim %s %d", key, rec.Token)
			close(running)
			<-ctx.Done()
			return idem.Result{}, ctx.Err()
		})
		t.Errorf("do %s returned: %v", key, err)
	}()
	<-running
	e.mark(crashHolding)
	time.Sleep(crashHangGuard) // the parent kills the child long before
	runtime.KeepAlive(e)       // and its progress pipe stays open until then
	t.Fatal("hold child was not killed")
}

const crashHeld = 9

func crashHeldKey(i int) string { return fmt.Sprintf("held-%d", i) }

// crashLine is one parsed ledger line.
type crashLine struct {
	key    string
	token  uint64
	amount int
}

// readCrashLedger parses the ledger into its lines by key. A line that
// does not parse, or whose amount is not its key's, is an error; so is an
// unterminated last line, unless partial (a reader racing an append).
func readCrashLedger(path string, partial bool) (map[string][]crashLine, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return map[string][]crashLine{}, nil
	}
	if err != nil {
		return nil, err
	}
	if n := bytes.LastIndexByte(data, '\n'); n+1 != len(data) {
		if !partial {
			return nil, fmt.Errorf("ledger ends with a torn line %q", data[n+1:])
		}
		data = data[:n+1]
	}
	lines := map[string][]crashLine{}
	for no, s := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		if s == "" {
			continue
		}
		var l crashLine
		if _, err := fmt.Sscanf(s, "%s %d %d", &l.key, &l.token, &l.amount); err != nil {
			return nil, fmt.Errorf("ledger line %d %q: %v", no+1, s, err)
		}
		if i, ok := crashIndex(l.key); !ok || l.amount != crashAmount(i) {
			return nil, fmt.Errorf("ledger line %d %q: bad key or amount", no+1, s)
		}
		lines[l.key] = append(lines[l.key], l)
	}
	return lines, nil
}

// crashRef names one claim: a key and its token.
type crashRef struct {
	key   string
	token uint64
}

// crashEvents is what the children noted.
type crashEvents struct {
	fails      []crashRef
	holds      map[crashRef]bool
	claims     map[string]uint64
	violations []string
}

func readCrashEvents(t testing.TB, path string) crashEvents {
	t.Helper()
	ev := crashEvents{holds: map[crashRef]bool{}, claims: map[string]uint64{}}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return ev
	}
	require.NoError(t, err)
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		kind, rest, _ := strings.Cut(sc.Text(), " ")
		if kind == "violation" {
			ev.violations = append(ev.violations, rest)
			continue
		}
		var r crashRef
		_, err := fmt.Sscanf(rest, "%s %d", &r.key, &r.token)
		require.NoError(t, err, "event %q", sc.Text())
		switch kind {
		case "fail":
			ev.fails = append(ev.fails, r)
		case "hold":
			ev.holds[r] = true
		case "claim":
			ev.claims[r.key] = r.token
		default:
			t.Fatalf("unknown event %q", sc.Text())
		}
	}
	return ev
}

// crashResolver is the parent's downstream check: the ledger, read once
// per recovery (no child runs then), decides every stale claim.
type crashResolver struct {
	ledger map[string][]crashLine
	holds  map[crashRef]bool

	// mu guards the counts and problems, written by Resolve.
	mu                                 sync.Mutex
	committed, committedHeld, notCommd int
	problems                           []string
}

func (r *crashResolver) Resolve(_ context.Context, rec *idem.Record) (idem.Resolution, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	lines := r.ledger[rec.Key]
	switch {
	case rec.Scope != crashScope:
		r.problems = append(r.problems, fmt.Sprintf("stale claim in scope %q", rec.Scope))
	case len(lines) == 0:
		r.notCommd++
		return idem.Resolution{Verdict: idem.VerdictNotCommitted}, nil
	case len(lines) == 1 && lines[0].token == rec.Token:
		r.committed++
		if r.holds[crashRef{rec.Key, rec.Token}] {
			r.committedHeld++
		}
		return idem.Resolution{Verdict: idem.VerdictCommitted, Result: crashResult(rec.Key, rec.Token)}, nil
	default:
		// An earlier claim's effect is booked and a later claim exists: the
		// later one was granted after the effect, a duplicate in waiting.
		r.problems = append(r.problems, fmt.Sprintf("stale claim %s/%d, but the ledger holds %v", rec.Key, rec.Token, lines))
	}
	return idem.Resolution{}, errors.New("crash test: resolver refuses an impossible claim")
}

// crashChild is a running child process.
type crashChild struct {
	cmd      *exec.Cmd
	out      bytes.Buffer // stdout and stderr; read only after Wait
	progress chan byte    // the child's milestones, closed when it is gone
	seen     []byte       // milestones read so far
	waited   bool
	state    *os.ProcessState
}

func startCrashChild(t *testing.T, mode string, env ...string) *crashChild {
	t.Helper()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	c := &crashChild{progress: make(chan byte, 4096)}
	c.cmd = exec.Command(os.Args[0], "-test.run=^TestCrash_Child$", "-test.count=1")
	c.cmd.Env = append(append(os.Environ(), crashEnvMode+"="+mode), env...)
	c.cmd.Stdout = &c.out
	c.cmd.Stderr = &c.out
	c.cmd.ExtraFiles = []*os.File{w}
	require.NoError(t, c.cmd.Start())
	_ = w.Close() // the child's copy is the only writer left: its death closes the pipe
	go func() {
		defer close(c.progress)
		defer r.Close()
		buf := make([]byte, 256)
		for {
			n, err := r.Read(buf)
			for _, b := range buf[:n] {
				c.progress <- b
			}
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		if !c.waited {
			_ = c.cmd.Process.Kill()
			_ = c.cmd.Wait()
		}
	})
	return c
}

// await reads milestones until it has seen n of kind, and reports false if
// the child closed the pipe (exited) first.
func (c *crashChild) await(t *testing.T, kind byte, n int) bool {
	t.Helper()
	guard := time.NewTimer(crashHangGuard)
	defer guard.Stop()
	for n > 0 {
		select {
		case b, ok := <-c.progress:
			if !ok {
				return false
			}
			c.seen = append(c.seen, b)
			if b == kind {
				n--
			}
		case <-guard.C:
			// SIGQUIT makes the Go runtime print every goroutine.
			_ = c.cmd.Process.Signal(syscall.SIGQUIT)
			c.wait()
			t.Fatalf("child made no progress in %s; its output:\n%s", crashHangGuard, c.out.String())
		}
	}
	return true
}

// end sends SIGKILL if kill is set (a no-op if the child already exited),
// reaps the child and reports whether the signal killed it. A child that
// exited on its own must have passed.
func (c *crashChild) end(t *testing.T, kill bool) (killed bool) {
	t.Helper()
	if kill {
		_ = c.cmd.Process.Signal(syscall.SIGKILL)
	}
	c.wait()
	if strings.Contains(c.out.String(), "WARNING: DATA RACE") {
		t.Errorf("the child saw a data race; its output:\n%s", c.out.String())
	}
	ws, _ := c.state.Sys().(syscall.WaitStatus)
	if ws.Signaled() && ws.Signal() == syscall.SIGKILL {
		return true
	}
	require.True(t, c.state.Success(), "child failed (%s); its output:\n%s", c.state, c.out.String())
	return false
}

func (c *crashChild) wait() {
	_ = c.cmd.Wait()
	c.waited = true
	c.state = c.cmd.ProcessState
	for b := range c.progress {
		c.seen = append(c.seen, b)
	}
}

func (c *crashChild) count(kind byte) int { return bytes.Count(c.seen, []byte{kind}) }

// crashStats are the numbers a run logs.
type crashStats struct {
	cycles, killed, exited, killedBeforeOpen, killedMidEffect int
	effects, orphans, committed, committedHeld, notCommitted  int
	sweeps, begins, replays, failures, failedThenRan          int
	reopenFailures                                            int
}

// crashListDir names the files in dir with their sizes.
func crashListDir(dir string) string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, e := range entries {
		if fi, err := e.Info(); err == nil {
			fmt.Fprintf(&b, "%s (%d bytes) ", e.Name(), fi.Size())
		}
	}
	return b.String()
}

func TestCrash_KillAndRecover(t *testing.T) {
	cycles := 50
	if testing.Short() {
		cycles = 10
	}
	if s := os.Getenv(crashEnvCycles); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err, crashEnvCycles)
		cycles = n
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(crashEnvSeed); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, crashEnvSeed)
		seed = n
	}
	t.Logf("seed %d (%s=%d repeats the kill schedule), %d cycles", seed, crashEnvSeed, seed, cycles)
	rng := rand.New(rand.NewPCG(seed, 0))

	root := t.TempDir()
	dir := filepath.Join(root, "store")
	ledger := filepath.Join(root, "ledger")
	events := filepath.Join(root, "events")
	var st crashStats
	totalKeys := (cycles-1)*crashStride + crashWindow
	defer func() {
		// The numbers, also when a check failed.
		if lines, err := readCrashLedger(ledger, true); err == nil {
			for _, l := range lines {
				st.effects += len(l)
			}
		}
		t.Logf("%d cycles: %d killed (%d before the store opened, %d mid-effect: with claims open), %d exited on their own",
			st.cycles, st.killed, st.killedBeforeOpen, st.killedMidEffect, st.exited)
		t.Logf("%d effects booked over %d keys; %d orphaned claims recovered: %d committed (%d of them held, %d killed between effect and save), %d not committed",
			st.effects, totalKeys, st.orphans, st.committed, st.committedHeld, st.committed-st.committedHeld, st.notCommitted)
		t.Logf("recovery by Sweep in %d cycles, by Begin in %d; final pass: %d keys replay their ledger line; %d failed attempts released (%d of their keys ran later)",
			st.sweeps, st.begins, st.replays, st.failures, st.failedThenRan)
	}()

	for cycle := range cycles {
		first := cycle * crashStride
		finished := false
		child := startCrashChild(t, "work",
			crashEnvDir+"="+dir, crashEnvLedger+"="+ledger, crashEnvEvents+"="+events,
			fmt.Sprintf("%s=%d,%d", crashEnvKeys, first, crashWindow),
			fmt.Sprintf("%s=%d", crashEnvSeed, rng.Uint64()))
		// Real delays against a real process: the point is to land the
		// kill at arbitrary instructions, which no injected clock can do.
		switch r := rng.IntN(10); {
		case r < 2:
			// Right after start: often before the store is even open.
			time.Sleep(time.Duration(rng.IntN(30_000)) * time.Microsecond)
		case r < 9:
			// Mid-stream, just after an effect: often before its result
			// is saved.
			if child.await(t, crashOpened, 1) && child.await(t, crashEffected, rng.IntN(crashStride+2)) &&
				rng.IntN(3) > 0 {
				time.Sleep(time.Duration(rng.IntN(3_000)) * time.Microsecond)
			}
		default:
			// Not at all: the child finishes its work and closes the store
			// (leaving its held claims open).
			finished = child.await(t, crashDone, 1)
		}
		killed := child.end(t, !finished)
		st.cycles++
		switch {
		case !killed:
			st.exited++
		case child.count(crashOpened) == 0:
			st.killed++
			st.killedBeforeOpen++
		default:
			st.killed++
		}
		interrupted := recoverCrash(t, &st, child, dir, ledger, events, first+crashWindow, cycle%2 == 0)
		if killed && interrupted > 0 {
			st.killedMidEffect++
		}
	}

	// The final pass: recover once more, then every key either replays the
	// result of its one ledger line or, without a line, is free to run.
	lines, err := readCrashLedger(ledger, false)
	require.NoError(t, err)
	ev := readCrashEvents(t, events)
	res := &crashResolver{ledger: lines, holds: ev.holds}
	s, err := idem.Open(dir, &idem.Options{Lease: crashLease, SweepInterval: -1, Resolver: res})
	require.NoError(t, err)
	defer s.Close() // a no-op after the Close below
	ctx := context.Background()
	rep, err := s.Sweep(ctx)
	require.NoError(t, err)
	require.Zero(t, rep.Stale, "stale claims survived the per-cycle recovery: %+v", rep)
	for i := range totalKeys {
		key := crashKey(i)
		c, saved, err := s.Begin(ctx, crashRequest(key))
		require.NoError(t, err, key)
		if l := lines[key]; len(l) > 0 {
			require.Len(t, l, 1, "effect of %s booked twice", key)
			require.NotNil(t, saved, "%s has a ledger line but no saved result", key)
			require.Equal(t, crashResult(key, l[0].token), *saved, "replay of %s", key)
			st.replays++
			continue
		}
		require.NotNil(t, c, "%s has no ledger line but replays %+v", key, saved)
		require.NoError(t, c.Release(ctx, "final check"))
	}
	for _, f := range ev.fails {
		st.failures++
		l := lines[f.key]
		require.LessOrEqual(t, len(l), 1, f.key)
		if len(l) == 1 {
			require.NotEqual(t, f.token, l[0].token, "%s: the failed claim's effect is booked", f.key)
			st.failedThenRan++
		}
	}
	for i := range totalKeys {
		if crashDoomed(i) {
			require.Empty(t, lines[crashKey(i)], "doomed key %s ran", crashKey(i))
		}
	}
	rep, err = s.Sweep(ctx)
	require.NoError(t, err)
	require.Zero(t, rep.Stale, "%+v", rep)
	stale, err := s.Backend().Stale(ctx, time.Now().Add(24*time.Hour), 1<<20)
	require.NoError(t, err)
	require.Empty(t, stale)
	requireNoOpenClaims(t, s)
	require.Empty(t, res.problems)
	require.NoError(t, s.Close())
	if st.reopenFailures > 0 {
		t.Errorf("the store failed to reopen after %d of %d kills", st.reopenFailures, st.killed)
	}
}

// recoverCrash reopens the store after a child, recovers its orphaned
// claims through the ledger (by Sweep or by Begin on every key), checks
// every key below upTo, and closes. It returns the number of orphans that
// the child did not hold on purpose: claims its death interrupted.
func recoverCrash(t *testing.T, st *crashStats, child *crashChild, dir, ledger, events string, upTo int, sweep bool) int {
	t.Helper()
	out := child.out.String()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("cycle %d: %s\nchild output:\n%s", st.cycles, fmt.Sprintf(format, args...), out)
	}
	lines, err := readCrashLedger(ledger, false)
	if err != nil {
		fail("%v", err)
	}
	for key, l := range lines {
		if len(l) > 1 {
			fail("the effect of %s is booked %d times: %v", key, len(l), l)
		}
	}
	ev := readCrashEvents(t, events)
	if len(ev.violations) > 0 {
		fail("violations:\n%s", strings.Join(ev.violations, "\n"))
	}

	res := &crashResolver{ledger: lines, holds: ev.holds}
	opts := &idem.Options{Durability: idem.Durable, Lease: crashLease, SweepInterval: -1, Resolver: res}
	s, err := idem.Open(dir, opts)
	if err != nil {
		// A store must open after any crash. (A kill inside Badger's own
		// Open leaves an empty .vlog or .mem file, which Badger v4.9.6
		// refuses on the next Open and repairs in passing: a known upstream
		// bug, github.com/dgraph-io/badger/issues/2207.) Report it, and open again so that the rest of the
		// run is still checked.
		st.reopenFailures++
		t.Errorf("cycle %d: the store does not reopen after the kill: %v\nstore files: %s",
			st.cycles, err, crashListDir(dir))
		if s, err = idem.Open(dir, opts); err != nil {
			fail("second reopen: %v", err)
		}
	}
	defer func() {
		if err := s.Close(); err != nil {
			fail("close: %v", err)
		}
	}()
	ctx := context.Background()

	// A restart orphans every open claim at once: no lease to wait for.
	var orphans []string
	notHeld := 0
	err = s.Backend().(backend.Lister).Scan(ctx, func(rec *idem.Record) bool {
		if rec.State == idem.StateInProgress {
			orphans = append(orphans, rec.Key)
			if !ev.holds[crashRef{rec.Key, rec.Token}] {
				notHeld++
			}
			if !rec.LeaseEnds.IsZero() || !rec.Stale(time.Now()) {
				fail("claim %s/%d survived the restart with lease end %s", rec.Key, rec.Token, rec.LeaseEnds)
			}
		}
		return true
	})
	if err != nil {
		fail("scan: %v", err)
	}
	st.orphans += len(orphans)

	if sweep {
		st.sweeps++
		rep, err := s.Sweep(ctx)
		if err != nil {
			fail("sweep: %v", err)
		}
		if rep.Stale != len(orphans) || rep.Committed+rep.NotCommitted != len(orphans) ||
			rep.Unknown+rep.Attention+rep.Unresolved != 0 {
			fail("sweep over %d orphans: %+v; resolver: %v", len(orphans), rep, res.problems)
		}
	} else {
		// Recovery on access: a Begin on every key of the cycle, and on
		// every orphan (all of them are in the window, but make sure).
		st.begins++
		keys := append([]string(nil), orphans...)
		for i := max(upTo-crashWindow, 0); i < upTo; i++ {
			keys = append(keys, crashKey(i))
		}
		for _, key := range keys {
			c, saved, err := s.Begin(ctx, crashRequest(key))
			switch {
			case err != nil:
				fail("begin %s: %v; resolver: %v", key, err, res.problems)
			case c != nil:
				if len(lines[key]) > 0 {
					fail("%s has a ledger line, yet a new claim %d was granted", key, c.Token())
				}
				if err := c.Release(ctx, "recovery check"); err != nil {
					fail("release %s: %v", key, err)
				}
			case len(lines[key]) == 0:
				fail("%s has no ledger line but replays %+v", key, saved)
			case !bytes.Equal(saved.Body, crashResult(key, lines[key][0].token).Body):
				fail("%s replays %q, its ledger line is %v", key, saved.Body, lines[key][0])
			}
		}
	}
	if len(res.problems) > 0 {
		fail("resolver: %v", res.problems)
	}
	st.committed += res.committed
	st.committedHeld += res.committedHeld
	st.notCommitted += res.notCommd

	// Every key so far: a ledger line means done with that line's token and
	// result; no line means free (released or never claimed), not done.
	for i := range upTo {
		key := crashKey(i)
		rec, err := s.Get(ctx, crashScope, key)
		l := lines[key]
		switch {
		case errors.Is(err, idem.ErrNotFound):
			if len(l) > 0 {
				fail("%s has a ledger line %v but no record", key, l)
			}
		case err != nil:
			fail("get %s: %v", key, err)
		case len(l) > 0:
			if rec.State != idem.StateDone || rec.Token != l[0].token || rec.Result == nil ||
				!bytes.Equal(rec.Result.Body, crashResult(key, l[0].token).Body) {
				fail("%s: ledger line %v, record %s token %d result %+v", key, l[0], rec.State, rec.Token, rec.Result)
			}
		case rec.State != idem.StateReleased:
			fail("%s has no ledger line but is %s (token %d)", key, rec.State, rec.Token)
		}
	}
	if err := openClaims(ctx, s); err != nil {
		fail("%v", err)
	}
	return notHeld
}

// openClaims returns an error naming any record still in progress or
// marked as needing attention.
func openClaims(ctx context.Context, s *idem.Store) error {
	var open []string
	err := s.Backend().(backend.Lister).Scan(ctx, func(rec *idem.Record) bool {
		if rec.State == idem.StateInProgress || rec.Attention {
			open = append(open, fmt.Sprintf("%s/%d %s attention=%v", rec.Key, rec.Token, rec.State, rec.Attention))
		}
		return true
	})
	if err == nil && len(open) > 0 {
		err = fmt.Errorf("claims left open: %v", open)
	}
	return err
}

func requireNoOpenClaims(t testing.TB, s *idem.Store) {
	t.Helper()
	require.NoError(t, openClaims(context.Background(), s))
}

func TestBadger_Reopen_OrphansOpenClaims(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "store")
	events := filepath.Join(root, "events")
	child := startCrashChild(t, "hold", crashEnvDir+"="+dir,
		crashEnvLedger+"="+filepath.Join(root, "ledger"), crashEnvEvents+"="+events)
	if !child.await(t, crashHolding, 1) {
		child.end(t, true)
		t.Fatalf("the child exited before holding its claims; its output:\n%s", child.out.String())
	}
	require.True(t, child.end(t, true), "the child was not killed")
	tokens := readCrashEvents(t, events).claims
	require.Len(t, tokens, crashHeld)

	// A lease of an hour and a clock that never moves: only the restart
	// can make these claims stale.
	clk := idemtest.NewClock(time.Now())
	ctx := context.Background()
	s, err := idem.Open(dir, &idem.Options{Lease: time.Hour, Clock: clk, SweepInterval: -1})
	require.NoError(t, err)
	for i := range crashHeld {
		key := crashHeldKey(i)
		rec, err := s.Get(ctx, crashScope, key)
		require.NoError(t, err)
		require.Equal(t, idem.StateInProgress, rec.State, key)
		require.Equal(t, tokens[key], rec.Token, key)
		require.True(t, rec.LeaseEnds.IsZero(), "%s: lease ends %s after the restart", key, rec.LeaseEnds)
		// Without a resolver nobody can tell whether the effect happened:
		// outcome unknown, never "in progress" (no one is running it).
		_, _, err = s.Begin(ctx, crashRequest(key))
		require.ErrorIs(t, err, idem.ErrOutcomeUnknown, key)
		require.NotErrorIs(t, err, idem.ErrInProgress, key)
	}
	rep, err := s.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, idem.SweepReport{Stale: crashHeld, Unresolved: crashHeld}, rep)
	require.NoError(t, s.Close())

	// With a resolver, Begin resolves each claim at once: even keys
	// committed downstream, odd ones not.
	var mu sync.Mutex
	asked := map[string]uint64{}
	resolver := idem.ResolverFunc(func(_ context.Context, rec *idem.Record) (idem.Resolution, error) {
		mu.Lock()
		defer mu.Unlock()
		asked[rec.Key] = rec.Token
		var i int
		_, _ = fmt.Sscanf(rec.Key, "held-%d", &i)
		if i%2 == 0 {
			return idem.Resolution{Verdict: idem.VerdictCommitted, Result: crashResult(rec.Key, rec.Token)}, nil
		}
		return idem.Resolution{Verdict: idem.VerdictNotCommitted}, nil
	})
	s, err = idem.Open(dir, &idem.Options{Lease: time.Hour, Clock: clk, SweepInterval: -1, Resolver: resolver})
	require.NoError(t, err)
	defer s.Close()
	for i := range crashHeld {
		key := crashHeldKey(i)
		c, saved, err := s.Begin(ctx, crashRequest(key))
		require.NoError(t, err, key)
		if i%2 == 0 {
			require.NotNil(t, saved, key)
			require.Equal(t, crashResult(key, tokens[key]), *saved, key)
			continue
		}
		require.NotNil(t, c, key)
		require.NotEqual(t, tokens[key], c.Token(), key)
		require.Equal(t, clk.Now().Add(time.Hour), c.LeaseEnds(), key)
		require.NoError(t, c.Complete(ctx, crashResult(key, c.Token())))
	}
	require.Equal(t, tokens, asked)
	requireNoOpenClaims(t, s)
}
