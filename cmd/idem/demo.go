package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/idemhttp"
)

// demoConfig configures one demo: the same run twice, without keys and
// with idem.
type demoConfig struct {
	// Seed drives every random choice: plans, faults, backoff, latency.
	// Goroutine scheduling still varies, so counts move a little between
	// runs of one seed; the outcome (no duplicate with idem) does not.
	Seed uint64
	// Agents is the number of concurrent agent runs; Refunds the refunds
	// each one plans.
	Agents, Refunds int
	// Dir is where the store directory is made; "" means a temporary
	// directory, removed afterwards.
	Dir string
	// Crash crashes and restarts the server once per run, when 40% of the
	// refunds are done.
	Crash bool
	// Progress, if set, receives a progress bar.
	Progress io.Writer
}

// runReport is what one run did.
type runReport struct {
	WithIdem bool
	// Intended counts the planned refunds; the ledger's tally says what
	// was executed.
	Intended int
	tally
	// From the store's events (with idem only).
	Replays, InProgress, Mismatches, RecoveredCommitted, RecoveredNotCommitted int64
	// From the agents and the faulty path.
	Attempts, Drops, Timeouts, Dupes, Restarts, Drifts, Refused, GaveUp int64
	Crashes                                                             int
	Elapsed                                                             time.Duration
}

// demoReport is the two runs side by side.
type demoReport struct {
	Config        demoConfig
	StoreDir      string
	Without, With runReport
}

func demoCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("idem demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := demoConfig{}
	fs.Uint64Var(&cfg.Seed, "seed", 1, "seed of every random choice")
	fs.IntVar(&cfg.Agents, "agents", 64, "concurrent agent runs")
	fs.IntVar(&cfg.Refunds, "refunds", 3, "refunds each agent plans")
	fs.StringVar(&cfg.Dir, "dir", "", "`directory` to make the store in, if not given as the argument (default: a temporary directory, removed afterwards)")
	fs.BoolVar(&cfg.Crash, "crash", true, "crash and restart the tool server mid-run")
	setUsage(fs, "[flags] [DIR]", `
Runs simulated agents against a refund tool server on 127.0.0.1 through a faulty
network, once without idempotency keys and once with idem, and compares the ledgers.
Exits with status 1 if idem let a duplicate refund through.`,
		"idem demo",
		"idem demo -agents 16 -seed 7 /tmp/idem-demo")
	pos, err := parseAnywhere(fs, args)
	if err != nil {
		return err // -h printed the usage; or the flag package printed why
	}
	if cfg.Dir, _, err = takeDir(fs, cfg.Dir, pos, []string{"DIR"}, true); err != nil {
		return err
	}
	switch {
	case cfg.Agents < 1 || cfg.Agents > 1000:
		fmt.Fprintln(stderr, "idem demo: -agents must be 1 to 1000")
		return errUsage
	case cfg.Refunds < 1 || cfg.Refunds > 50:
		fmt.Fprintln(stderr, "idem demo: -refunds must be 1 to 50")
		return errUsage
	}
	if f, ok := stdout.(*os.File); ok && isTerminal(f) {
		cfg.Progress = stdout
	}
	rep, err := runDemo(ctx, cfg)
	if err != nil {
		return err
	}
	rep.print(stdout)
	return rep.verdict()
}

// verdict fails the demo if idem let a duplicate refund through.
func (r demoReport) verdict() error {
	if r.With.Duplicates > 0 {
		return fmt.Errorf("idem let %d duplicate refunds through", r.With.Duplicates)
	}
	return nil
}

// runDemo runs the demo: the same agents, plans and faults without keys,
// then with idem.
func runDemo(ctx context.Context, cfg demoConfig) (demoReport, error) {
	rep := demoReport{Config: cfg}
	parent := cfg.Dir
	if parent == "" {
		tmp, err := os.MkdirTemp("", "idem-demo-")
		if err != nil {
			return rep, err
		}
		defer os.RemoveAll(tmp)
		parent = tmp
	} else if err := os.MkdirAll(parent, 0o755); err != nil {
		return rep, err
	}
	// A fresh directory each time: a store left by an earlier demo would
	// replay its refunds, since one seed derives the same keys.
	dir, err := os.MkdirTemp(parent, "store-")
	if err != nil {
		return rep, err
	}
	rep.StoreDir = dir

	plans := makePlans(cfg)
	prog := newProgress(cfg.Progress, 2*cfg.Agents*cfg.Refunds)
	defer prog.finish()

	perRun := cfg.Agents * cfg.Refunds
	prog.setLabel("without keys")
	if rep.Without, err = runOnce(ctx, cfg, false, "", plans, prog); err != nil {
		return rep, fmt.Errorf("run without keys: %w", err)
	}
	prog.reach(perRun) // refunds an agent gave up on are settled too
	prog.setLabel("with idem")
	if rep.With, err = runOnce(ctx, cfg, true, dir, plans, prog); err != nil {
		return rep, fmt.Errorf("run with idem: %w", err)
	}
	prog.reach(2 * perRun)
	return rep, nil
}

// makePlans gives each agent its refunds: distinct orders, random amounts.
func makePlans(cfg demoConfig) [][]step {
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x9a7))
	plans := make([][]step, cfg.Agents)
	for a := range plans {
		for i := range cfg.Refunds {
			plans[a] = append(plans[a], step{order: fmt.Sprintf("A%03d-%d", a, i), amount: 500 + rng.IntN(19500)})
		}
	}
	return plans
}

// runOnce runs every agent against a fresh server and ledger.
func runOnce(ctx context.Context, cfg demoConfig, withIdem bool, dir string, plans [][]step, prog *progress) (runReport, error) {
	rep := runReport{WithIdem: withIdem}
	start := time.Now()
	l := newLedger()
	srv := newToolServer(withIdem, dir, l, cfg.Seed)
	if err := srv.start(); err != nil {
		return rep, err
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = srv.stop(context.Background())
		}
	}()

	intended := map[string]string{}
	for _, plan := range plans {
		for _, st := range plan {
			intended[st.order] = cents(st.amount)
		}
	}
	total := int64(len(intended))

	network := &http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: 10 * time.Second}
	defer network.CloseIdleConnections()
	stats := &runStats{}
	var (
		bg        sync.WaitGroup // requests still in flight for no one
		agents    sync.WaitGroup
		completed atomic.Int64
	)
	for i, plan := range plans {
		rng := rand.New(rand.NewPCG(cfg.Seed, uint64(i)+1))
		path := &faultyPath{base: network, server: srv, rng: rng, stats: stats, bg: &bg}
		a := &agent{
			name: fmt.Sprintf("agent-%03d", i), runID: fmt.Sprintf("run-%d-%03d", cfg.Seed, i), plan: plan,
			withKeys: withIdem, ledger: l, stats: stats, rng: rng,
			client: &http.Client{Transport: &idemhttp.Transport{
				Base: path, MaxAttempts: 6, BaseDelay: 5 * time.Millisecond, MaxDelay: 200 * time.Millisecond,
				MaxElapsed: 10 * time.Second, AttemptTimeout: 5 * time.Second,
				// RoundTrip runs on the agent's goroutine, which owns rng.
				Jitter: func(max time.Duration) time.Duration { return time.Duration(rng.Int64N(int64(max) + 1)) },
			}},
			progress: func() { completed.Add(1); prog.add() },
		}
		a.login = func() string { return srv.tokens.issue(a.name) }
		agents.Go(func() { a.run(ctx) })
	}

	allDone := make(chan struct{})
	crashed := make(chan error, 1)
	go func() {
		if !cfg.Crash {
			crashed <- nil
			return
		}
		// Crash when 40% of the refunds are done, while some are in flight.
		for completed.Load() < total*2/5 {
			select {
			case <-allDone:
				crashed <- nil
				return
			case <-time.After(time.Millisecond):
			}
		}
		// Strike, if it comes within a moment, while a refund has been
		// made and its answer is not yet recorded: the hardest case.
		for range 2000 {
			if srv.unrecorded.Load() > 0 {
				break
			}
			time.Sleep(100 * time.Microsecond)
		}
		srv.crash()
		rep.Crashes++
		time.Sleep(20 * time.Millisecond) // down for a moment
		crashed <- srv.start()
	}()
	agents.Wait()
	close(allDone)
	if err := <-crashed; err != nil {
		return rep, fmt.Errorf("restart after the crash: %w", err)
	}
	bg.Wait()
	// Connections the client dialed but never used would hold a graceful
	// shutdown for seconds: close them first.
	network.CloseIdleConnections()
	stopped = true
	if err := srv.stop(ctx); err != nil {
		return rep, err
	}

	rep.Intended = len(intended)
	rep.tally = l.tally(intended)
	ev := srv.events
	rep.Replays, rep.InProgress, rep.Mismatches = ev.replayed.Load(), ev.inProgress.Load(), ev.mismatch.Load()
	rep.RecoveredCommitted, rep.RecoveredNotCommitted = ev.committed.Load(), ev.notCommitted.Load()
	rep.Attempts, rep.Drops, rep.Timeouts, rep.Dupes = stats.attempts.Load(), stats.drops.Load(), stats.timeouts.Load(), stats.dupes.Load()
	rep.Restarts, rep.Drifts, rep.Refused, rep.GaveUp = stats.restarts.Load(), stats.drifts.Load(), stats.refused.Load(), stats.gaveUp.Load()
	rep.Elapsed = time.Since(start)
	return rep, ctx.Err()
}

// faultsNote explains why the two columns of "what went wrong" differ.
const faultsNote = `Both runs draw faults at the same rates from the same seed: per HTTP attempt (drops,
timeouts, duplicate deliveries) and per tool call (restarts, changed amounts). The counts
differ because the runs make different calls. Without keys the client may not retry a POST,
so every lost answer goes back to the agent, whose loop restarts and asks the model again for
refunds already made, which is when the model changes amounts. With idem the client retries
with the key instead, and a changed amount is never paid: the server refuses it with 422
(counted once per tool call, however many of the call's attempts were refused).
`

// print writes the two runs side by side.
func (r demoReport) print(w io.Writer) {
	c := r.Config
	crash := ""
	if c.Crash {
		crash = " · the tool server crashes and restarts mid-run"
	}
	fmt.Fprintf(w, "idem demo · %d agents × %d refunds · seed %d%s\n\n", c.Agents, c.Refunds, c.Seed, crash)
	a, b := r.Without, r.With
	row := func(name string, without, with any) { fmt.Fprintf(w, "%-38s %12v %12v\n", name, without, with) }
	row("", "without keys", "with idem")
	row("refunds intended", a.Intended, b.Intended)
	row("refunds executed", a.Executed, b.Executed)
	row("duplicate refunds", a.Duplicates, b.Duplicates)
	row("  of them with a changed amount", a.WrongAmount, b.WrongAmount)
	row("refunds never made", a.Missing, b.Missing)
	row("responses replayed", "-", b.Replays)
	row("409 in progress", "-", b.InProgress)
	row("422 changed amount refused", "-", b.Refused)
	row("claims recovered after the crash", "-", b.RecoveredCommitted+b.RecoveredNotCommitted)
	row("  committed (the ledger had it)", "-", b.RecoveredCommitted)
	row("  not committed (runs on retry)", "-", b.RecoveredNotCommitted)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "what went wrong on the way")
	row("  responses dropped after acting", a.Drops, b.Drops)
	row("  client timeouts", a.Timeouts, b.Timeouts)
	row("  duplicate deliveries", a.Dupes, b.Dupes)
	row("  amounts changed by the model", a.Drifts, b.Drifts)
	row("  agent loop restarts", a.Restarts, b.Restarts)
	row("  server crashes", a.Crashes, b.Crashes)
	row("HTTP attempts", a.Attempts, b.Attempts)
	row("agents that gave up", a.GaveUp, b.GaveUp)
	row("time", a.Elapsed.Round(10*time.Millisecond), b.Elapsed.Round(10*time.Millisecond))
	fmt.Fprintln(w)
	fmt.Fprint(w, faultsNote)
	fmt.Fprintln(w)
	if b.Duplicates > 0 {
		fmt.Fprintf(w, "FAIL: idem let %d duplicate refunds through.\n", b.Duplicates)
	} else {
		fmt.Fprintf(w, "Without keys, %d of %d refunds were paid more than once (%d extra payments).\n",
			a.Multiple, a.Intended, a.Duplicates)
		fmt.Fprintf(w, "With idem, no refund was paid twice: %d executed for %d intended.\n", b.Executed, b.Intended)
	}
	if c.Dir != "" {
		fmt.Fprintf(w, "The store is kept in %s\n", r.StoreDir)
	}
}
