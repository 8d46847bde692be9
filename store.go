package idem

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/badgerstore"
	"github.com/idemkit/idem/keyring"
)

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
	sweeps    sync.Mutex      // one Sweep at a time
	counts    tallies         // replays and rejections not yet flushed
	ledger    countLedger     // what counts may have been lost (countledger.go)
	tallier   backend.Tallier // the backend, if it keeps counts
	hot       *hotSet         // the replay cache (replaycache.go)
	wall      *wallClock      // reads the clock when it is the system clock
	// rules settle stale claims of a scope in place of the Resolver
	// (crashrecovery.go); set in New, then only read.
	rules map[string]recoveryRule
	// flights holds the resolutions of stale claims in progress (flight.go).
	flights flights
	// held names why this Store held claims, for the story recovery
	// writes, on backends that keep no such note (held.go).
	held heldNotes
	// marked is set once the store's encryption marker is known to be
	// stored; marking serializes the writes of it (encrypted.go).
	marked  atomic.Bool
	marking sync.Mutex
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
		clockDone: make(chan struct{}), drained: make(chan struct{}),
		hot: newHotSet(shares.hotBytes), counts: tallies{limit: shares.tallies}, rules: map[string]recoveryRule{JournalScope: journalRule(), EncryptionScope: markerRule()}}
	s.cond = sync.NewCond(&s.mu)
	s.tallier, _ = b.(backend.Tallier)
	s.openLedger(context.Background())
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

	s.closed.Store(true)
	if s.ops.Load() == 0 {
		s.drainOnce.Do(func() { close(s.drained) })
	}
	<-s.drained
	// No backend call runs now, nor will: a replay whose read was in
	// flight has counted, so these counts are the last, and the ledger
	// may say so.
	direct := func(fn func() error) error { return fn() }
	if err := s.flushWith(context.Background(), direct); err != nil {
		s.observeErr("tally", "", "", 0, err)
	}
	s.closeLedger(context.Background(), direct)
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
// It returns ErrNotFound when nothing is stored. A result sealed with
// Options.Keys is opened; one under a key the ring does not hold gives a
// *MissingKeyError (Inspect reads such a record), one that does not open
// ErrCorrupt.
func (s *Store) Get(ctx context.Context, scope, key string) (*Record, error) {
	rec, err := s.read(ctx, scope, key)
	if err != nil {
		return nil, err
	}
	if err := s.open(scope, key, rec); err != nil {
		return nil, err
	}
	return rec, nil
}

// Inspect returns the stored record of (scope, key) as Get does, but a
// result sealed under a key the Store does not hold (none, without
// Options.Keys) is no error: the record comes back whole, its story,
// times and counts, with a Result holding only Status and Truncated (no
// body, headers or error: they are sealed), and sealedUnder names the key
// that seals them. sealedUnder is empty when the result, if any, is
// opened or was stored in clear. Operators' views (idem inspect,
// idemadmin) read records through it.
func (s *Store) Inspect(ctx context.Context, scope, key string) (rec *Record, sealedUnder string, err error) {
	rec, err = s.read(ctx, scope, key)
	if err != nil {
		return nil, "", err
	}
	err = s.open(scope, key, rec)
	if errors.Is(err, ErrMissingKey) {
		id, _ := keyring.Sealed(rec.Result)
		rec.Result = &Result{Status: rec.Result.Status, Truncated: rec.Result.Truncated}
		return rec, id, nil
	}
	if err != nil {
		return nil, "", err
	}
	return rec, "", nil
}

// read returns the stored record of (scope, key) as the backend holds it.
func (s *Store) read(ctx context.Context, scope, key string) (*Record, error) {
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
