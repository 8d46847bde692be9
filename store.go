package idem

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/badgerstore"
)

// Defaults for zero Options fields. Retention and Lease are exported for
// callers that size their own timings from them.
const (
	DefaultRetention      = 24 * time.Hour
	DefaultLease          = 30 * time.Second
	defaultSweepInterval  = 10 * time.Second
	defaultMaxUnknown     = 10
	defaultRecheckBackoff = time.Second
	defaultCloseTimeout   = 30 * time.Second
	maxRecheckBackoff     = 10 * time.Minute
)

// Options configure a Store. Nil Options, and every zero field, mean the
// documented default.
type Options struct {
	// Retention is how long a done record replays before it expires and a
	// repeat runs again. Set it longer than the longest pause any run can
	// take (retries, a resumed agent run). Default 24 hours. A Request may
	// override it. At least the Lease.
	Retention time.Duration

	// Lease is how long a claim stays live without a heartbeat. Do extends
	// it every Lease/3 while the effect runs, so only a dead or hung holder
	// lets it end. Default 30 seconds.
	Lease time.Duration

	// Durability says whether commits are synced to disk (Durable, the
	// default) or only survive a process crash (Fast). Open gives it to the
	// embedded backend; a backend given to New has a setting of its own
	// (badgerstore.Options, pgstore.Options).
	Durability Durability

	// Resolver answers, for a stale claim, whether its effect happened
	// downstream. Nil means stale claims stay in progress and are reported
	// (ErrOutcomeUnknown), never silently run again.
	Resolver Resolver

	// RecoveryGrace is how long past its lease's end a stale claim taken by
	// another live instance (another Owner; not one orphaned by a restart)
	// waits before it goes to the Resolver: a holder that was paused (a GC
	// pause, a stopped VM or container, a network path holding its writes)
	// may still be acting on it, and its effect's write may still arrive.
	// Default the Lease; negative means no grace. Claims of this instance,
	// orphaned ones and transactional ones (pgstore.DoTx) do not wait.
	//
	// What remains: an effect that is neither transactional nor fenced
	// downstream (a write that refuses older fencing tokens) and whose holder
	// pauses for longer than the lease plus the grace can still take effect
	// after the Resolver answered "not committed", so it may run twice. The
	// grace narrows that window; only DoTx or fencing closes it.
	RecoveryGrace time.Duration

	// SweepInterval is how often the background sweep recovers stale claims
	// and reclaims expired records. Default 10 seconds, or the Retention if
	// shorter; negative disables the background sweep (call Sweep
	// yourself). Longer than the Retention is refused.
	SweepInterval time.Duration

	// MaxUnknown is how many inconclusive resolver answers a claim gets
	// before it is marked as needing attention. Default 10.
	MaxUnknown int

	// RecheckBackoff is the wait before asking the resolver again after an
	// inconclusive answer; it doubles with every answer, up to ten minutes.
	// Default 1 second.
	RecheckBackoff time.Duration

	// Policy decides what Do does with each outcome. Default DefaultPolicy.
	Policy Policy

	// Clock is the store's time. Default the system clock (SystemClock),
	// which the store reads as a wall-clock reading at most a second old
	// advanced by the monotonic clock: one clock read per request. A replay
	// of a record with over a minute to live reads none: it is judged on a
	// reading refreshed every 100 ms in the background (see Caveats in the
	// package documentation). Any other Clock is read on every request.
	Clock Clock

	// Observer receives every transition. Default none.
	Observer Observer

	// ErrorText turns the error an effect returned into the text Do keeps
	// in the record: the saved error a replay returns (SavedError) and the
	// reason a released attempt's story gives. An error's own text may
	// carry secrets (tokens, account numbers, queries), and records are
	// exported and replayed to every caller of the key, so the default,
	// DefaultErrorText, keeps only a generic word. The Observer still gets
	// the error itself (Event.Err); the Logger logs its full text unless
	// ErrorText is set, in which case it logs what ErrorText returns.
	ErrorText func(error) string

	// Logger, if set, logs every transition (routine ones at Debug,
	// rejections and recoveries at Info, attention and effects that may
	// have run twice at Warn, errors at Error) with the scope, key and
	// token as attributes, and, under Open, the engine's warnings.
	Logger *slog.Logger

	// Owner names this process in the claims it takes (Record.Owner), so
	// that an operator can tell who held a stuck claim. Default the host
	// name, the process id and a random suffix.
	Owner string

	// CloseTimeout bounds how long Close waits for running effects and open
	// claims to finish before closing the storage under them (their claims
	// are then recovered on the next open). Default 30 seconds.
	CloseTimeout time.Duration

	// MemoryBudget bounds, in bytes, the memory the store holds in the host
	// process: under Open, Badger's memtables (B/32 each; two may wait for
	// their flush, one below the default budget), index cache (B/32) and
	// table builders (tables of B/128), and on every backend the Store's
	// replay cache (B/5, scaled by B/64 MiB below the default budget) and
	// the replays and rejections counted between two flushes (B/16 KiB
	// records). Default 64 MiB; values under 16 MiB are raised to 16
	// (backend.DefaultMemoryBudget, MinMemoryBudget). It bounds live bytes: the process's resident memory also holds
	// the garbage collector's headroom (GOGC), which the host sets (with
	// GOMEMLIMIT), not a library, and Badger's compaction can briefly
	// exceed its share. Mapped table files are page cache, not counted.
	// docs/memory.md has the split and what it holds.
	MemoryBudget int64
}

func (o *Options) withDefaults() Options {
	var c Options
	if o != nil {
		c = *o
	}
	if c.Retention <= 0 {
		c.Retention = DefaultRetention
	}
	if c.Lease <= 0 {
		c.Lease = DefaultLease
	}
	if c.RecoveryGrace == 0 {
		c.RecoveryGrace = c.Lease
	}
	if c.RecoveryGrace < 0 {
		c.RecoveryGrace = 0
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = min(defaultSweepInterval, c.Retention)
	}
	if c.MaxUnknown <= 0 {
		c.MaxUnknown = defaultMaxUnknown
	}
	if c.RecheckBackoff <= 0 {
		c.RecheckBackoff = defaultRecheckBackoff
	}
	if c.Policy == nil {
		c.Policy = DefaultPolicy
	}
	if c.Clock == nil {
		c.Clock = SystemClock()
	}
	if c.CloseTimeout <= 0 {
		c.CloseTimeout = defaultCloseTimeout
	}
	c.MemoryBudget = backend.MemoryBudget(c.MemoryBudget)
	var obs multiObserver
	if c.Observer != nil {
		obs = append(obs, c.Observer)
	}
	if c.Logger != nil {
		obs = append(obs, slogObserver(c.Logger, c.ErrorText))
	}
	switch len(obs) {
	case 0:
		c.Observer = nil
	case 1:
		c.Observer = obs[0]
	default:
		c.Observer = obs
	}
	return c
}

// Store runs effects once per (scope, key) and replays their results. It is
// safe for concurrent use by any number of goroutines.
type Store struct {
	b     backend.Backend
	o     Options
	owner string // this instance's name, stored with its claims

	// mu guards the fields below it; cond signals their changes.
	mu        sync.Mutex
	cond      *sync.Cond
	accepting bool // new requests are taken (false once Close starts)
	// refusing mirrors !accepting for the request path's quick check; the
	// claim count still decides under mu.
	refusing atomic.Bool
	claims   int // claims handed out and not finished

	// ops counts backend calls in flight and closed forbids new ones. They
	// are atomics, off the mutex, because every request touches them: a
	// call adds itself to ops and then checks closed; Close sets closed and
	// then waits for drained, closed by whichever of Close and the last call
	// sees ops at zero with closed set, so no call runs on a closed backend.
	ops       atomic.Int64
	closed    atomic.Bool
	drained   chan struct{}
	drainOnce sync.Once

	stop      chan struct{}   // closed to stop the background goroutines
	bgDone    chan struct{}   // closed when the background sweep has returned
	tallyDone chan struct{}   // closed when the tally flusher has returned
	clockDone chan struct{}   // closed when the clock loop has returned
	flushNow  chan struct{}   // asks the tally flusher to flush early
	sweeps    sync.Mutex      // one Sweep at a time
	counts    tallies         // replays and rejections not yet flushed
	tallier   backend.Tallier // the backend, if it keeps counts
	hot       *hotSet         // the replay cache (hot.go)
	wall      *wallClock      // reads the clock when it is the system clock
	// rules settle stale claims of a scope in place of the Resolver
	// (crashrecovery.go); set in New, then only read.
	rules map[string]recoveryRule
	// flights holds the resolutions of stale claims in progress (flight.go).
	flights flights
	// panics names the claims this Store held after their effect panicked,
	// for the story recovery writes (panic.go).
	panics panicNotes
}

// Open opens (or creates) a store in a directory on the embedded backend
// (package badgerstore), with its defaults and Options' Durability,
// MemoryBudget and Logger. Claims left open by an earlier process are
// orphaned at once and resolved by recovery. Options that make no sense
// are refused with an error naming the fields (Options.Validate,
// ErrInvalidOptions). To tune the embedded backend, or to keep a store in
// memory for tests, open it with badgerstore.Open and pass it to New.
func Open(dir string, opts *Options) (*Store, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	b, err := badgerstore.Open(dir, badgerstore.Options{Durability: o.Durability, MemoryBudget: o.MemoryBudget,
		Logger: o.Logger})
	if err != nil {
		return nil, err
	}
	return New(b, opts), nil
}

// New returns a Store over any Backend, such as pgstore's. The Store owns
// the backend from then on and closes it in Close. It panics if the
// options make no sense (Options.Validate), as constructors do on bad
// configuration; Open returns that error instead.
func New(b backend.Backend, opts *Options) *Store {
	if err := opts.Validate(); err != nil {
		panic(err)
	}
	o := opts.withDefaults()
	shares := sharesOf(o.MemoryBudget)
	owner := o.Owner
	if owner == "" {
		var id [3]byte
		_, _ = rand.Read(id[:])
		host, _ := os.Hostname()
		owner = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(id[:]))
	}
	s := &Store{b: b, o: o, owner: owner, accepting: true,
		stop: make(chan struct{}), bgDone: make(chan struct{}), tallyDone: make(chan struct{}),
		clockDone: make(chan struct{}), flushNow: make(chan struct{}, 1), drained: make(chan struct{}),
		hot: newHotSet(shares.hotBytes), counts: tallies{limit: shares.tallies}, rules: map[string]recoveryRule{JournalScope: journalRule()}}
	s.cond = sync.NewCond(&s.mu)
	s.tallier, _ = b.(backend.Tallier)
	if _, ok := o.Clock.(systemClock); ok {
		s.wall = &wallClock{}
	}
	go s.tallyLoop()
	if s.wall != nil {
		s.wall.refresh()
		go s.clockLoop()
	} else {
		close(s.clockDone)
	}
	s.openLossWindow() // loss.go
	if s.o.SweepInterval > 0 {
		go s.background()
	} else {
		close(s.bgDone)
	}
	return s
}

// Backend returns the store's backend.
func (s *Store) Backend() backend.Backend { return s.b }

// Options returns the options in force, defaults filled in.
func (s *Store) Options() Options { return s.o }

// Close stops taking requests, waits up to Options.CloseTimeout for running
// effects and open claims to finish, stops the background sweep, waits for
// storage calls in flight, and closes the backend. It is safe to call while
// requests are in flight and more than once; calls after the first return
// nil. Requests that arrive after Close began get ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	if !s.accepting {
		s.mu.Unlock()
		return nil
	}
	s.accepting = false
	s.refusing.Store(true)
	deadline := time.Now().Add(s.o.CloseTimeout)
	timer := time.AfterFunc(s.o.CloseTimeout, func() {
		s.mu.Lock()
		s.cond.Broadcast()
		s.mu.Unlock()
	})
	for s.claims > 0 && time.Now().Before(deadline) {
		s.cond.Wait()
	}
	timer.Stop()
	s.mu.Unlock()

	close(s.stop)
	<-s.bgDone
	<-s.tallyDone
	<-s.clockDone
	if err := s.flushTallies(context.Background()); err != nil {
		s.observeErr("tally", "", "", 0, err)
	}

	s.closed.Store(true)
	if s.ops.Load() == 0 {
		s.drainOnce.Do(func() { close(s.drained) })
	}
	<-s.drained
	return s.b.Close()
}

// call runs fn, one backend call, unless Close has closed the backend to
// calls (ErrClosed). Every backend call goes through it.
func (s *Store) call(fn func() error) error {
	s.ops.Add(1)
	defer s.leave()
	if s.closed.Load() {
		return ErrClosed
	}
	return fn()
}

// leave ends a call, and signals Close when it was the last one.
func (s *Store) leave() {
	if s.ops.Add(-1) == 0 && s.closed.Load() {
		s.drainOnce.Do(func() { close(s.drained) })
	}
}

// accept refuses new requests once Close began. A request that passes it
// while Close starts is still caught by claimStarted, under mu.
func (s *Store) accept() error {
	if s.refusing.Load() {
		return ErrClosed
	}
	return nil
}

// claimStarted counts a claim handed out, unless Close began.
func (s *Store) claimStarted() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.accepting {
		return false
	}
	s.claims++
	return true
}

func (s *Store) claimFinished() {
	s.mu.Lock()
	s.claims--
	if s.claims == 0 {
		s.cond.Broadcast()
	}
	s.mu.Unlock()
}

// clockLoop refreshes the latest reading of the system clock every
// coarseEvery until the store stops, for replays to be judged on (see
// coarseSlack).
func (s *Store) clockLoop() {
	defer close(s.clockDone)
	t := time.NewTicker(coarseEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.wall.refresh()
		}
	}
}

func (s *Store) now() time.Time {
	if s.wall != nil {
		return s.wall.now()
	}
	return s.o.Clock.Now()
}

func (s *Store) observe(e Event) {
	if s.o.Observer == nil {
		return
	}
	if e.Time.IsZero() {
		e.Time = s.now()
	}
	s.o.Observer.Observe(e)
}

func (s *Store) observeErr(op, scope, key string, token uint64, err error) {
	if s.o.Observer == nil || err == nil || errors.Is(err, ErrClosed) {
		return
	}
	s.observe(Event{Kind: EventError, Scope: scope, Key: key, Token: token, Reason: op, Err: err})
}

// Get returns the stored record of (scope, key) as it is, for inspection:
// it may be in progress, done, released or expired but not yet reclaimed.
// It reads idem's own scopes (ReservedScopePrefix) too.
// It returns ErrNotFound when nothing is stored.
func (s *Store) Get(ctx context.Context, scope, key string) (*Record, error) {
	if err := validate(scope, key, true); err != nil {
		return nil, err
	}
	var rec *Record
	err := s.call(func() (err error) {
		rec, err = s.b.Get(ctx, scope, key)
		return err
	})
	return rec, err
}

// validate checks a caller's scope and key; idem's own callers (the
// Journal) pass own, which admits the reserved scopes.
func validate(scope, key string, own bool) error {
	if err := backend.ValidateKey(key); err != nil {
		return err
	}
	if own {
		return backend.ValidateStoredScope(scope)
	}
	return backend.ValidateScope(scope)
}

func (s *Store) background() {
	defer close(s.bgDone)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		if _, err := s.Sweep(ctx); err != nil && !errors.Is(err, ErrClosed) && ctx.Err() == nil {
			s.observeErr("sweep", "", "", 0, err)
		}
		// The backend's own housekeeping runs here, off the requests and off
		// the Sweep a caller times.
		if m, ok := s.b.(backend.Maintainer); ok {
			if err := s.call(func() error { return m.Maintain(ctx) }); err != nil &&
				!errors.Is(err, ErrClosed) && ctx.Err() == nil {
				s.observeErr("maintain", "", "", 0, err)
			}
		}
		select {
		case <-s.stop:
			return
		case <-s.o.Clock.After(s.o.SweepInterval):
		}
	}
}
