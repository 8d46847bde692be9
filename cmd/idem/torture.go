package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// tortureConfig configures a torture run.
type tortureConfig struct {
	Duration time.Duration
	// Cycles, if positive, stops the run after that many kills instead.
	Cycles int
	// Dir holds the store and the ledger; "" means a temporary directory,
	// removed afterwards unless a violation was found.
	Dir           string
	Workers, Keys int
	Seed          uint64
	// KillMin and KillMax bound how long a child runs after its store
	// opened (in one cycle in five: after it started) before its SIGKILL.
	KillMin, KillMax time.Duration
	// Sample is how many keys acknowledged in earlier cycles Do replays
	// after each restart, beside every key of the last cycle.
	Sample int
	// FullEvery, if positive, makes every FullEvery-th check (and always
	// the last) a full one: every record, every acknowledged key replayed.
	FullEvery int
	// KillAfterAcks, if positive, kills each child right after that many
	// acknowledgements arrived instead of at a random moment (tests use it:
	// a kill that surely lands mid-traffic).
	KillAfterAcks int
	// Child is the command that starts a child; default this executable's
	// "torture".
	Child []string
	// Stderr receives a dead child's output when it broke a rule.
	Stderr io.Writer
}

// tortureReport is what a run did: the closing numbers.
type tortureReport struct {
	Command string `json:"command"`
	Seed    uint64 `json:"seed"`
	Dir     string `json:"dir,omitempty"`
	Workers int    `json:"workers"`
	Keys    int    `json:"keys"`
	Elapsed string `json:"elapsed"`
	// Cycles counts children started, each killed and followed by a check;
	// KilledBeforeOpen those killed before their store was open.
	Cycles           int `json:"cycles"`
	KilledBeforeOpen int `json:"killed_before_open"`
	// DoCalls counts the Do calls whose outcome a child reported; of them
	// Executed ran the effect, Replayed answered with a saved result,
	// Failed had an injected effect failure (released), Busy met another
	// holder, Unknown met ErrOutcomeUnknown.
	DoCalls  int `json:"do_calls"`
	Executed int `json:"executed"`
	Replayed int `json:"replayed"`
	Failed   int `json:"failed"`
	Busy     int `json:"busy"`
	Unknown  int `json:"unknown"`
	// Executions counts the effects booked in the ledger: Executed, plus
	// those a kill caught between the booking and the report.
	Executions int `json:"executions"`
	// AckedKeys counts the distinct keys acknowledged; Acks every
	// acknowledgement.
	AckedKeys int `json:"acknowledged_keys"`
	Acks      int `json:"acks"`
	// Orphans counts the distinct claims found open after a kill;
	// ResolvedCommitted and ResolvedNotCommitted the Resolver's verdicts on
	// orphans, in the parent or in a child; ResolvedInChildren those of
	// the children, under traffic.
	Orphans              int `json:"orphans"`
	ResolvedCommitted    int `json:"resolved_committed"`
	ResolvedNotCommitted int `json:"resolved_not_committed"`
	ResolvedInChildren   int `json:"resolved_in_children"`
	// ReplaysVerified counts the parent's Do calls on acknowledged keys;
	// FullChecks the checks of every record and acknowledged key.
	ReplaysVerified int      `json:"replays_verified"`
	FullChecks      int      `json:"full_checks"`
	Violations      int      `json:"violations"`
	Messages        []string `json:"violation_messages,omitempty"`
}

func tortureCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if env := os.Getenv(tortureChildEnv); env != "" {
		return tortureChildMain(ctx, env, stderr)
	}
	fs := flag.NewFlagSet("idem torture", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := tortureConfig{Stderr: stderr}
	var kill string
	var asJSON bool
	fs.DurationVar(&cfg.Duration, "duration", time.Minute, "how long to run")
	fs.IntVar(&cfg.Cycles, "cycles", 0, "stop after this many kills instead (0: run for -duration)")
	fs.StringVar(&cfg.Dir, "dir", "", "`directory` for the store and the ledger, if not given as the argument (default: a temporary one, removed unless something failed)")
	fs.IntVar(&cfg.Workers, "workers", 16, "goroutines calling Do in the child")
	fs.IntVar(&cfg.Keys, "keys", 512, "how many of the latest keys the repeats draw from (3 calls in 5 are repeats)")
	fs.Uint64Var(&cfg.Seed, "seed", 0, "seed of the kill schedule and the children's choices (0: from the clock)")
	fs.StringVar(&kill, "kill-every", "50ms-1.5s", "MIN-MAX: how long a child runs after its store opened before its SIGKILL (one in five is timed from its start)")
	fs.IntVar(&cfg.Sample, "sample", 500, "earlier acknowledged keys replayed after each kill, beside the last cycle's")
	fs.IntVar(&cfg.FullEvery, "full-every", 50, "every N cycles (and at the end) check every record and replay every acknowledged key (0: only at the end)")
	fs.BoolVar(&asJSON, "json", false, "print the summary as JSON")
	setUsage(fs, "[flags] [DIR]", `
Runs a child process (this binary) doing Durable Do on many goroutines over a store
whose effects book lines in a synced ledger, SIGKILLs it at random moments and
restarts it. After every kill it recovers the store with a Resolver over the ledger
and checks: no effect booked twice, every acknowledged result replays byte for byte
(Do runs nothing), every record agrees with the ledger, no claim is left open.
Exits with status 1 on any violation.`,
		"idem torture -duration 10m -workers 32",
		"idem torture -cycles 200 -seed 42 -json /tmp/idem-torture")
	pos, err := parseAnywhere(fs, args)
	if err != nil {
		return err
	}
	if cfg.Dir, _, err = takeDir(fs, cfg.Dir, pos, []string{"DIR"}, true); err != nil {
		return err
	}
	if cfg.KillMin, cfg.KillMax, err = parseKillRange(kill); err != nil {
		fmt.Fprintf(stderr, "idem torture: -kill-every: %v\n", err)
		return errUsage
	}
	switch {
	case cfg.Workers < 1 || cfg.Workers > 1024:
		fmt.Fprintln(stderr, "idem torture: -workers must be 1 to 1024")
		return errUsage
	case cfg.Keys < 1:
		fmt.Fprintln(stderr, "idem torture: -keys must be at least 1")
		return errUsage
	case cfg.Duration <= 0 && cfg.Cycles <= 0:
		fmt.Fprintln(stderr, "idem torture: -duration or -cycles must be positive")
		return errUsage
	}
	if cfg.Seed == 0 {
		cfg.Seed = uint64(time.Now().UnixNano())
	}
	rep, err := runTorture(ctx, cfg)
	rep.Command = "idem torture " + strings.Join(args, " ")
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
	} else {
		rep.print(stdout)
	}
	if err != nil {
		return err
	}
	if rep.Violations > 0 {
		return fmt.Errorf("%d violations", rep.Violations)
	}
	return nil
}

func parseKillRange(s string) (lo, hi time.Duration, err error) {
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		b = a
	}
	if lo, err = time.ParseDuration(a); err == nil {
		hi, err = time.ParseDuration(b)
	}
	if err == nil && (lo <= 0 || hi < lo) {
		err = fmt.Errorf("want MIN-MAX with 0 < MIN <= MAX, got %q", s)
	}
	return lo, hi, err
}

func tortureChildMain(ctx context.Context, env string, stderr io.Writer) error {
	var cfg tortureChildConfig
	if err := json.Unmarshal([]byte(env), &cfg); err != nil {
		return fmt.Errorf("%s: %w", tortureChildEnv, err)
	}
	return runTortureChild(ctx, cfg, os.NewFile(3, "torture-report"), stderr)
}

// tortureRun is the parent's state across cycles.
type tortureRun struct {
	cfg    tortureConfig
	rep    *tortureReport
	rng    *rand.Rand
	store  string
	ledger *ledgerIndex
	acks   map[string][32]byte
	// ackList is the acknowledged keys in order, to sample from.
	ackList []string
	// orphans holds every orphaned claim counted, as "key/token".
	orphans map[string]bool
	// base is the first key no child has used.
	base int
}

// runTorture kills and restarts children until the time or the cycles are
// up, or a check fails, then checks once more, replaying every
// acknowledged key. A temporary directory is kept if anything failed.
func runTorture(ctx context.Context, cfg tortureConfig) (rep *tortureReport, err error) {
	start := time.Now()
	rep = &tortureReport{Seed: cfg.Seed, Workers: cfg.Workers, Keys: cfg.Keys}
	dir := cfg.Dir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "idem-torture-")
		if err != nil {
			return rep, err
		}
		dir = tmp
		defer func() {
			if rep.Violations == 0 && err == nil {
				_ = os.RemoveAll(tmp)
			}
		}()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return rep, err
	}
	rep.Dir = dir
	if len(cfg.Child) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return rep, err
		}
		cfg.Child = []string{exe, "torture"}
	}
	r := &tortureRun{
		cfg: cfg, rep: rep, rng: rand.New(rand.NewPCG(cfg.Seed, 0x7047)),
		store: filepath.Join(dir, "store"), ledger: newLedgerIndex(filepath.Join(dir, "ledger")),
		acks: map[string][32]byte{}, orphans: map[string]bool{},
	}
	deadline := start.Add(cfg.Duration)
	for ctx.Err() == nil && rep.Violations == 0 {
		if cfg.Cycles > 0 && rep.Cycles >= cfg.Cycles || cfg.Cycles <= 0 && !time.Now().Before(deadline) {
			break
		}
		if err = r.cycle(ctx); err != nil {
			break
		}
	}
	if err == nil && rep.Violations == 0 {
		// The final check: every record, every acknowledged key replays.
		rep.FullChecks++
		err = r.check(context.WithoutCancel(ctx), nil, nil, true, true)
	}
	rep.Elapsed = time.Since(start).Round(time.Millisecond).String()
	rep.AckedKeys = len(r.acks)
	rep.Executions = r.ledger.total
	return rep, err
}

// cycle starts a child, kills it, and checks what it left.
func (r *tortureRun) cycle(ctx context.Context) error {
	cmd, lines, out, err := r.startChild()
	if err != nil {
		return err
	}
	r.rep.Cycles++
	got := r.awaitKill(ctx, lines)
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	for s := range lines {
		got = append(got, s)
	}
	if !slices.Contains(got, string(reportOpened)) {
		r.rep.KilledBeforeOpen++
	}
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		r.violation("cycle %d: the child exited on its own (%s)", r.rep.Cycles, cmd.ProcessState)
	}
	if strings.Contains(out.String(), "WARNING: DATA RACE") {
		r.violation("cycle %d: the child saw a data race", r.rep.Cycles)
	}
	replay, touched := r.takeReports(got)
	if r.rep.Violations > 0 {
		fmt.Fprintf(r.cfg.Stderr, "idem torture: cycle %d child's output:\n%s\n", r.rep.Cycles, out.String())
	}
	// Every other cycle the parent leaves the orphans to the next child,
	// whose sweep and Do calls settle them under its traffic.
	full := r.cfg.FullEvery > 0 && r.rep.Cycles%r.cfg.FullEvery == 0
	if full {
		r.rep.FullChecks++
	}
	// An interrupt ends the run after this check, which must still run whole.
	return r.check(context.WithoutCancel(ctx), replay, touched, r.rep.Cycles%2 == 0, full)
}

// startChild starts a child and returns its report lines (the channel is
// closed when the child is gone; a last line the kill cut is dropped) and
// its output.
func (r *tortureRun) startChild() (*exec.Cmd, <-chan string, *tailBuffer, error) {
	child, err := json.Marshal(tortureChildConfig{
		Dir: r.store, Ledger: r.ledger.path, Workers: r.cfg.Workers, Window: r.cfg.Keys, Base: r.base,
		Seed: r.rng.Uint64(), Lifetime: 10*r.cfg.KillMax + 2*tortureHangGuard,
	})
	if err != nil {
		return nil, nil, nil, err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, nil, nil, err
	}
	cmd := exec.Command(r.cfg.Child[0], r.cfg.Child[1:]...)
	cmd.Env = append(os.Environ(), tortureChildEnv+"="+string(child))
	out := &tailBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.ExtraFiles = []*os.File{pw}
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		return nil, nil, nil, err
	}
	pw.Close() // the child holds the only writer: its death ends the reports
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		defer pr.Close()
		br := bufio.NewReaderSize(pr, 64<<10)
		for {
			s, err := br.ReadString('\n')
			if err != nil {
				return // a last line without its newline was cut by the kill: not reported
			}
			lines <- strings.TrimSuffix(s, "\n")
		}
	}()
	return cmd, lines, out, nil
}

// tortureHangGuard only turns a child that never opens its store into a
// kill (and the check then finds why), instead of a run that waits forever.
const tortureHangGuard = 2 * time.Minute

// awaitKill collects a child's reports until it is time to kill it: a
// random moment in the kill range after its store opened or, in one cycle
// in five, after it started (to land in Open and its recovery); with
// KillAfterAcks, right after that many acknowledgements.
func (r *tortureRun) awaitKill(ctx context.Context, lines <-chan string) []string {
	delay := r.cfg.KillMin + time.Duration(r.rng.Int64N(int64(r.cfg.KillMax-r.cfg.KillMin)+1))
	fromStart := r.cfg.KillAfterAcks <= 0 && r.rng.IntN(5) == 0
	timer := time.NewTimer(tortureHangGuard)
	if fromStart {
		timer.Reset(delay)
	}
	defer timer.Stop()
	var got []string
	acks := 0
	for {
		select {
		case s, ok := <-lines:
			if !ok {
				return got // the child died on its own
			}
			got = append(got, s)
			switch {
			case s == string(reportOpened) && !fromStart && r.cfg.KillAfterAcks <= 0:
				timer.Reset(delay)
			case s != "" && s[0] == reportAck:
				if acks++; r.cfg.KillAfterAcks > 0 && acks >= r.cfg.KillAfterAcks {
					return got
				}
			}
		case <-timer.C:
			return got
		case <-ctx.Done():
			return got
		}
	}
}

// takeReports counts a dead child's report lines and records its
// acknowledgements. It returns the keys to replay (every key the child
// acknowledged and a sample of those acknowledged before) and every key the
// child reported on.
func (r *tortureRun) takeReports(got []string) (replay, touched []string) {
	rep := r.rep
	fresh := map[string]bool{}
	earlier := len(r.ackList)
	for _, s := range got {
		if s == "" {
			continue
		}
		kind, rest := s[0], strings.TrimPrefix(s[1:], " ")
		key, arg, _ := strings.Cut(rest, " ")
		if i, ok := tortureIndex(key); ok {
			r.base = max(r.base, i+1)
			touched = append(touched, key)
		}
		switch kind {
		case reportAck:
			rep.DoCalls++
			rep.Acks++
			how, hexSum, _ := strings.Cut(arg, " ")
			if how == "x" {
				rep.Executed++
			} else {
				rep.Replayed++
			}
			var sum [32]byte
			if b, err := hex.DecodeString(hexSum); err != nil || len(b) != len(sum) {
				r.violation("bad report line %q", s)
				continue
			} else {
				copy(sum[:], b)
			}
			prev, seen := r.acks[key]
			switch {
			case !seen:
				r.acks[key] = sum
				r.ackList = append(r.ackList, key)
			case prev != sum:
				r.violation("%s: acknowledged with two different results", key)
			}
			if !fresh[key] {
				fresh[key] = true
				replay = append(replay, key)
			}
		case reportFailed:
			rep.DoCalls++
			rep.Failed++
		case reportBusy:
			rep.DoCalls++
			rep.Busy++
		case reportUnknown:
			rep.DoCalls++
			rep.Unknown++
		case reportResolved:
			rep.ResolvedInChildren++
			if arg == "1" {
				rep.ResolvedCommitted++
			} else {
				rep.ResolvedNotCommitted++
			}
		case reportViolation:
			r.violation("child: %s", rest)
		case reportOpened:
		default:
			r.violation("bad report line %q", s)
		}
	}
	for range min(r.cfg.Sample, earlier) {
		if key := r.ackList[r.rng.IntN(earlier)]; !fresh[key] {
			fresh[key] = true
			replay = append(replay, key)
		}
	}
	return replay, touched
}

// check catches up with the ledger and checks the store (verifyStore): the
// records of the keys given and of the new ledger lines, or with full every
// record; then Do replays the keys given, or with full every acknowledged
// key. With recover it settles the orphaned claims itself; without, it
// leaves them to the next child.
func (r *tortureRun) check(ctx context.Context, replay, touched []string, recover, full bool) error {
	added, dups, err := r.ledger.catchUp()
	for _, key := range dups {
		r.violation("the effect of %s is booked twice: %v", key, r.ledger.lines[key])
	}
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	r.base = max(r.base, r.ledger.next)
	var st verifyStats
	vs, err := verifyStore(ctx, verifyInput{
		Dir: r.store, Ledger: r.ledger.lines, Acks: r.acks, Check: append(touched, added...), Replay: replay,
		Recover: recover, Full: full,
	}, &st)
	for _, v := range vs {
		r.violation("cycle %d: %s", r.rep.Cycles, v)
	}
	for _, o := range st.Orphans {
		if !r.orphans[o] {
			r.orphans[o] = true
			r.rep.Orphans++
		}
	}
	r.rep.ResolvedCommitted += st.Committed
	r.rep.ResolvedNotCommitted += st.NotCommitted
	r.rep.ReplaysVerified += st.Replays
	return err
}

func (r *tortureRun) violation(format string, args ...any) {
	r.rep.Violations++
	if len(r.rep.Messages) < 20 {
		r.rep.Messages = append(r.rep.Messages, fmt.Sprintf(format, args...))
	}
}
