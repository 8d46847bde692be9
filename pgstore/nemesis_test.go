package pgstore_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem/pgstore"
	"github.com/idemkit/idem/pgstore/pgtest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestNemesis runs worker processes (nemesis_worker_test.go) on a
// PostgreSQL cluster of its own, each through a proxy, racing on shared
// keys, while a nemesis kills workers (SIGKILL), pauses them past their
// lease (SIGSTOP, then SIGCONT 2 to 8 seconds later), crashes PostgreSQL
// (immediate stop) and starts it again, terminates backends, and has a
// worker's proxy drop its connections or hold its traffic and deliver it
// later. Then it checks what must hold: first with transactional effects
// (idem.DoTx), then with unfenced ones (Store.Do, a Resolver reading the
// ledger).
//
// IDEM_NEMESIS sets the total time of striking, split between the two
// modes (default 10s: a smoke run); .ci/run runs about a minute of it.
func TestNemesis(t *testing.T) {
	total := 10 * time.Second
	if v := os.Getenv("IDEM_NEMESIS"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("IDEM_NEMESIS=%q: %v", v, err)
		}
		total = d
	}
	needServer(t)
	// Its own cluster: the nemesis crashes it.
	cl, err := pgtest.Start(ctx, &pgtest.Options{NoSync: true, DirPrefix: "pgstore-nemesis-",
		Settings: []string{"fsync=off", "full_page_writes=off", "max_connections=400", "log_min_messages=warning"}})
	if errors.Is(err, pgtest.ErrNoBinaries) && os.Getenv(envRequire) != "1" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Stop()
	for _, mode := range []string{modeTx, modePlain} {
		t.Run(mode, func(t *testing.T) {
			n := newNemesis(t, cl, mode)
			n.run(total / 2)
			n.check()
		})
	}
}

const nemesisWorkers = 3

// nemesis is one run: the cluster, the workers and their proxies, the
// fault schedule and what the workers reported.
type nemesis struct {
	t       *testing.T
	cl      *pgtest.Cluster
	admin   *pgxpool.Pool // direct to the cluster, for faults and checks
	cfg     nemesisConfig
	proxies []*proxy
	workers []*nemesisProc
	rng     *rand.Rand
	undos   []nemesisUndo
	faults  map[string]int // injected, by kind (under mu: fault)
	incs    []int          // each slot's incarnations so far
	gone    []bool         // the slot's worker was killed, not yet restarted
	held    []bool         // the slot's proxy holds its traffic
	cut     []bool         // the slot's proxy refuses connections
	pgDown  atomic.Bool    // a crash and restart is under way
	bg      sync.WaitGroup // the crash and restart

	// mu guards the reports below, written by the workers' readers.
	mu         sync.Mutex
	acks       map[string]string // key -> the body acknowledged for it
	ackCount   int
	ackClashes []string                  // a key acknowledged with two bodies
	effects    map[string][]effectReport // key -> one per Do that ran its effect
	stats      map[string]map[string]int64
	failures   []string // workers that ended otherwise than asked; a failed restart
	pgKilled   int      // crashes that needed SIGKILL
	pgDowntime time.Duration
	errors     []string // errors of no known class, the first few of each worker
}

// effectReport is how a Do that ran the effect ended, as its worker said.
type effectReport struct {
	executor   string
	token      uint64
	fnOK       bool // the effect's write succeeded
	class, err string
}

func (e effectReport) String() string {
	s := fmt.Sprintf("%s token %d fn_ok=%v %s", e.executor, e.token, e.fnOK, e.class)
	if e.err != "" {
		s += " (" + e.err + ")"
	}
	return s
}

// nemesisProc is one incarnation of a worker.
type nemesisProc struct {
	slot   int
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *bytes.Buffer
	ready  chan struct{} // closed when it said "ready"
	exited chan struct{} // closed when it exited and its output was read
	killed bool          // by the nemesis: its end is expected; guarded by nemesis.mu
	bye    bool          // it said "bye": it ended as asked; guarded by nemesis.mu
}

// nemesisUndo ends a fault at a time: a SIGCONT, a release, a restart.
type nemesisUndo struct {
	at time.Time
	fn func()
}

func newNemesis(t *testing.T, cl *pgtest.Cluster, mode string) *nemesis {
	admin, err := pgxpool.New(ctx, cl.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	schema, err := pgtest.CreateSchema(ctx, cl.URL, "nemesis_")
	if err != nil {
		t.Fatal(err)
	}
	cfg := nemesisConfig{mode: mode, schema: schema, table: "records", lease: 1500 * time.Millisecond, grace: nemesisGrace(mode),
		ledger: pgx.Identifier{schema, "ledger"}.Sanitize()}
	b, err := pgstore.New(ctx, admin, &pgstore.Options{Schema: schema, Table: cfg.table})
	if err != nil {
		t.Fatal(err)
	}
	_ = b.Close()
	if _, err := admin.Exec(ctx, "CREATE TABLE "+cfg.ledger+" (key text NOT NULL, executor text NOT NULL, token bigint NOT NULL, "+
		"at timestamptz NOT NULL DEFAULT clock_timestamp())"); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(cl.URL)
	if err != nil {
		t.Fatal(err)
	}
	n := &nemesis{t: t, cl: cl, admin: admin, cfg: cfg, faults: map[string]int{},
		rng:  rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 16)),
		acks: map[string]string{}, effects: map[string][]effectReport{}, stats: map[string]map[string]int64{}}
	for i := range nemesisWorkers {
		n.proxies = append(n.proxies, startProxy(t, u.Host))
		n.workers = append(n.workers, nil)
		n.incs = append(n.incs, 0)
		n.gone, n.held, n.cut = append(n.gone, false), append(n.held, false), append(n.cut, false)
		n.spawn(i)
	}
	for _, w := range n.workers {
		select {
		case <-w.ready:
		case <-w.exited:
			t.Fatalf("%s ended before it was ready: %s", w.name, w.stderr)
		case <-time.After(2 * time.Minute):
			t.Fatalf("%s is not ready", w.name)
		}
	}
	t.Cleanup(func() {
		for _, w := range n.workers {
			select {
			case <-w.exited:
			default:
				_ = w.cmd.Process.Kill()
				<-w.exited
			}
		}
	})
	return n
}

// spawn starts the next incarnation of worker slot i, through its proxy.
func (n *nemesis) spawn(i int) {
	u, _ := url.Parse(n.cl.URL)
	u.Host = n.proxies[i].ln.Addr().String()
	n.incs[i]++
	cfg := n.cfg
	cfg.name = fmt.Sprintf("w%d.%d", i, n.incs[i])
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = cfg.environ(u.String())
	// A worker outlives no test run: a killed parent takes it along.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		n.t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		n.t.Fatal(err)
	}
	w := &nemesisProc{slot: i, name: cfg.name, cmd: cmd, stdin: stdin, stderr: &bytes.Buffer{},
		ready: make(chan struct{}), exited: make(chan struct{})}
	cmd.Stderr = w.stderr
	if err := cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	n.workers[i] = w
	go n.read(w, stdout)
}

// read takes in a worker's reports until it exits.
func (n *nemesis) read(w *nemesisProc, stdout io.Reader) {
	defer close(w.exited)
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		n.mu.Lock()
		switch {
		case f[0] == "ready":
			close(w.ready)
		case f[0] == "error":
			n.errors = append(n.errors, w.name+": "+strings.Join(f[1:], " "))
		case f[0] == "bye":
			w.bye = true
		case f[0] == "ack" && len(f) == 3:
			n.ackCount++
			if prev, ok := n.acks[f[1]]; ok && prev != f[2] {
				n.ackClashes = append(n.ackClashes, fmt.Sprintf("%s: %s and %s", f[1], prev, f[2]))
			}
			n.acks[f[1]] = f[2]
		case f[0] == "eff" && len(f) >= 5:
			tok, _ := strconv.ParseUint(f[2], 10, 64)
			n.effects[f[1]] = append(n.effects[f[1]], effectReport{executor: w.name, token: tok,
				fnOK: f[3] == "fn_ok", class: f[4], err: strings.Join(f[5:], " ")})
		case f[0] == "stat":
			m := map[string]int64{}
			for _, kv := range f[1:] {
				k, v, _ := strings.Cut(kv, "=")
				m[k], _ = strconv.ParseInt(v, 10, 64)
			}
			n.stats[w.name] = m
		}
		n.mu.Unlock()
	}
	err := w.cmd.Wait()
	n.mu.Lock()
	defer n.mu.Unlock()
	if !w.killed && (err != nil || !w.bye) {
		n.failures = append(n.failures, fmt.Sprintf("%s: %v\n%s", w.name, err, w.stderr))
	}
}

// run strikes for d, a fault every 0.3 to 1.5 seconds, each ended by its
// undo when due; then it ends every fault and stops the workers.
func (n *nemesis) run(d time.Duration) {
	end := time.Now().Add(d)
	next := time.Now().Add(n.gap())
	for {
		now := time.Now()
		if !now.Before(end) {
			break
		}
		n.undoDue(now)
		if !now.Before(next) {
			n.strike()
			next = time.Now().Add(n.gap())
		}
		wake := next
		if end.Before(wake) {
			wake = end
		}
		for _, u := range n.undos {
			if u.at.Before(wake) {
				wake = u.at
			}
		}
		t := time.NewTimer(time.Until(wake))
		<-t.C
	}
	n.undoDue(time.Time{}) // heal everything
	n.bg.Wait()
	// A run on a loaded machine may have acknowledged next to nothing
	// while it struck: the workers go on, healed, until a few keys are.
	for deadline := time.Now().Add(2 * time.Minute); n.ackedKeys() < minAckedKeys && time.Now().Before(deadline); {
		<-time.After(100 * time.Millisecond)
	}
	healed := time.Now()
	n.stopWorkers()
	n.t.Logf("the workers took %s to end", time.Since(healed).Round(time.Millisecond))
}

// minAckedKeys is how many keys a run acknowledges at least.
const minAckedKeys = 20

func (n *nemesis) ackedKeys() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.acks)
}

func (n *nemesis) gap() time.Duration {
	return 300*time.Millisecond + time.Duration(n.rng.Int64N(int64(1200*time.Millisecond)))
}

// undoDue runs the undos due at now; with the zero time, all of them, in
// the order they were scheduled.
func (n *nemesis) undoDue(now time.Time) {
	var keep []nemesisUndo
	var due []nemesisUndo
	for _, u := range n.undos {
		if now.IsZero() || !now.Before(u.at) {
			due = append(due, u)
		} else {
			keep = append(keep, u)
		}
	}
	n.undos = keep
	for _, u := range due {
		u.fn()
	}
}

func (n *nemesis) after(lo, hi time.Duration, fn func()) {
	d := lo + time.Duration(n.rng.Int64N(int64(hi-lo)+1))
	n.undos = append(n.undos, nemesisUndo{at: time.Now().Add(d), fn: fn})
}

// strike injects one fault, chosen at random.
func (n *nemesis) strike() {
	i := n.rng.IntN(nemesisWorkers)
	w := n.workers[i]
	switch k := n.rng.IntN(12); {
	case k < 2 && !n.gone[i]: // SIGKILL; a new incarnation starts a moment later
		n.mu.Lock()
		w.killed = true
		n.mu.Unlock()
		_ = w.cmd.Process.Signal(syscall.SIGKILL)
		<-w.exited
		n.gone[i] = true
		n.fault("kill", 1)
		n.after(100*time.Millisecond, 600*time.Millisecond, func() {
			n.spawn(i)
			n.gone[i] = false
		})
	case k < 5 && !n.gone[i]: // SIGSTOP for longer than the lease
		if err := w.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			return
		}
		n.fault("pause", 1)
		n.after(2*time.Second, 8*time.Second, func() { _ = w.cmd.Process.Signal(syscall.SIGCONT) })
	case k < 6 && !n.pgDown.Load(): // PostgreSQL's immediate stop, then a start
		n.pgDown.Store(true)
		n.fault("pg_crash", 1)
		down := 200*time.Millisecond + time.Duration(n.rng.Int64N(int64(1800*time.Millisecond)))
		// In the background: the stop and the start each take seconds
		// on a loaded machine, and the other faults go on meanwhile.
		n.bg.Add(1)
		go func() {
			defer n.bg.Done()
			start := time.Now()
			killed := n.cl.Crash()
			<-time.After(down)
			err := n.cl.Restart(context.Background())
			n.mu.Lock()
			n.pgDowntime += time.Since(start)
			if killed {
				n.pgKilled++ // it did not stop on SIGQUIT within 5 s
			}
			if err != nil {
				n.failures = append(n.failures, fmt.Sprintf("PostgreSQL did not start again: %v", err))
			}
			n.mu.Unlock()
			n.pgDown.Store(false)
		}()
	case k < 8 && !n.pgDown.Load(): // pg_terminate_backend of half the sessions
		// In the background: a slow server would hold the loop up to the
		// query's timeout, and every undo due meanwhile (a SIGCONT, a
		// release) would come late, lengthening the delays the covering
		// grace is sized for.
		n.bg.Add(1)
		go func() {
			defer n.bg.Done()
			var killed int
			qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			err := n.admin.QueryRow(qctx, "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "+
				"WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() AND random() < 0.5").Scan(&killed)
			if err == nil {
				n.fault("terminate", 1)
				n.fault("terminated_backends", killed)
			}
		}()
	case k < 10 && !n.cut[i]: // the proxy drops every connection, and refuses new ones a moment
		n.proxies[i].cut()
		n.cut[i] = true
		n.fault("drop", 1)
		n.after(0, time.Second, func() {
			n.proxies[i].restore()
			n.cut[i] = false
		})
	case k >= 10 && !n.held[i]: // the proxy holds the traffic, then delivers it
		n.proxies[i].hold()
		n.held[i] = true
		n.fault("hold", 1)
		n.after(2*time.Second, 8*time.Second, func() {
			n.proxies[i].release()
			n.held[i] = false
		})
	}
}

// fault counts by injected faults of kind. The faults run in the
// background count theirs too, hence the lock.
func (n *nemesis) fault(kind string, by int) {
	n.mu.Lock()
	n.faults[kind] += by
	n.mu.Unlock()
}

// stopWorkers asks every live worker to end (stdin closed) and waits.
func (n *nemesis) stopWorkers() {
	for _, w := range n.workers {
		_ = w.stdin.Close()
	}
	for _, w := range n.workers {
		select {
		case <-w.exited:
		case <-time.After(2 * time.Minute):
			n.t.Errorf("%s did not end within 2 minutes of being asked", w.name)
			_ = w.cmd.Process.Kill()
			<-w.exited
		}
	}
}

// nemesisGrace is the workers' RecoveryGrace: IDEM_NEMESIS_GRACE if set;
// else, for unfenced effects, longer than the longest delay the nemesis
// puts between an effect's write and PostgreSQL (a pause of up to 8 s
// before the write is sent, then a hold of up to 8 s in the proxy), so
// that no write can land after recovery asked the Resolver; else the
// default (the lease). IDEM_NEMESIS_GRACE=1.5s shows the window a grace
// shorter than the delays leaves (docs/nemesis.md).
func nemesisGrace(mode string) time.Duration {
	if d, err := time.ParseDuration(os.Getenv("IDEM_NEMESIS_GRACE")); err == nil {
		return d
	}
	if mode == modePlain {
		return nemesisCoveringGrace
	}
	return 0
}

// nemesisCoveringGrace is a RecoveryGrace above the nemesis's longest
// delay of a write (8 s paused, then 8 s held): with it, every effect that
// ran twice must be marked.
const nemesisCoveringGrace = 20 * time.Second
