package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/keyring"
)

// idemContenders returns idem on its embedded Badger backend in both
// durability modes. Everything goes through the public API, so the suite
// measures the store as a user gets it.
func idemContenders() []Contender {
	return []Contender{
		{
			Name: "idem", Kind: "idem", Durable: true, Portable: true,
			Config: "idem.Open on Badger, Durability: Durable (the default: every commit synced before it is acknowledged); " +
				"Begin + Claim.Complete per cycle, Store.Do for hot keys",
			Open: func(ctx context.Context, dir string) (Store, error) { return openBadgerIdem(dir, idem.Durable, 0, nil) },
		},
		{
			Name: "idem-fast", Kind: "idem", Durable: false, SameData: "idem", Portable: true,
			Config: "idem.Open on Badger, Durability: Fast (commits reach the page cache: survives a process crash, not a power loss)",
			Open:   func(ctx context.Context, dir string) (Store, error) { return openBadgerIdem(dir, idem.Fast, 0, nil) },
		},
		{
			Name: "idem-budget32", Kind: "idem", Durable: true, SameData: "idem", Portable: true,
			Config: "idem.Open on Badger, Durability: Durable, Options.MemoryBudget: 32 MiB",
			Open: func(ctx context.Context, dir string) (Store, error) {
				return openBadgerIdem(dir, idem.Durable, budgetContenderBytes, nil)
			},
		},
		{
			Name: "idem-encrypted", Kind: "idem", Durable: true, SameData: "idem", Portable: true,
			Config: "idem.Open on Badger, Durability: Durable, Options.Keys: a keyring of one AES-256-GCM key " +
				"(every result sealed before it is stored, opened on replay)",
			Open: func(ctx context.Context, dir string) (Store, error) {
				return openBadgerIdem(dir, idem.Durable, 0, benchRing())
			},
		},
	}
}

// benchRing is the keyring of the idem-encrypted contender: one key, of
// fixed bytes (the suite measures, it keeps no secret).
func benchRing() *keyring.Ring {
	r, err := keyring.New(keyring.Key{ID: "bench", Secret: bytes.Repeat([]byte{0x42}, keyring.KeySize)})
	if err != nil {
		panic(err) // a fixed, valid key
	}
	return r
}

// budgetContenderBytes is the MemoryBudget of the idem-budget32 contender,
// which the sustained-write target judges against budget + 32 MiB.
const budgetContenderBytes = 32 << 20

// idemOptions are the options every idem store of the suite uses: the
// background sweep is off (the recovery workload calls Sweep itself), a
// Resolver answers VerdictCommitted, and Close gives up quickly on the claims the
// recovery workload abandons on purpose.
func idemOptions(d idem.Durability, result []byte) *idem.Options {
	return &idem.Options{
		Durability:    d,
		SweepInterval: -1,
		CloseTimeout:  50 * time.Millisecond,
		Resolver: idem.ResolverFunc(func(ctx context.Context, rec *idem.Record) (idem.Resolution, error) {
			return idem.Resolution{Verdict: idem.VerdictCommitted, Result: idem.Result{Status: 200, Body: result}}, nil
		}),
	}
}

// idemStore adapts an *idem.Store to the suite's interfaces. The public
// API has no bulk load, so Fill loads through a second store opened for
// loading (Fast durability on Badger, synchronous_commit off on
// PostgreSQL) and then opens the store as the contender runs it.
type idemStore struct {
	// mu guards s and closeS against Fill's reopening; workloads never
	// run requests during Fill.
	mu     sync.RWMutex
	s      *idem.Store
	closeS func() error // closes s and what it holds (a pool)

	// open opens the store on the same data, for loading when load is
	// true and as the contender runs it otherwise.
	open func(load bool) (*idem.Store, func() error, error)
	// abandonLease is the lease of the claims Abandon leaves: zero for
	// the default (Badger's reopen orphans them), short where a reopen
	// does not (PostgreSQL, shared by many processes).
	abandonLease time.Duration
}

// openBadgerIdem opens idem on Badger in dir. budget is the store's
// memory budget in bytes, zero for the default; keys, if not nil,
// encrypts its results.
func openBadgerIdem(dir string, d idem.Durability, budget int64, keys *keyring.Ring) (*idemStore, error) {
	return newIdemStore(func(load bool) (*idem.Store, func() error, error) {
		mode := d
		if load {
			mode = idem.Fast
		}
		o := idemOptions(mode, benchResult)
		o.MemoryBudget = budget // zero: the default
		o.Keys = keys
		s, err := idem.Open(dir, o)
		if err != nil {
			return nil, nil, err
		}
		return s, s.Close, nil
	}, 0)
}

func newIdemStore(open func(load bool) (*idem.Store, func() error, error), abandonLease time.Duration) (*idemStore, error) {
	s, closeS, err := open(false)
	if err != nil {
		return nil, err
	}
	return &idemStore{s: s, closeS: closeS, open: open, abandonLease: abandonLease}, nil
}

func (st *idemStore) store() *idem.Store {
	st.mu.RLock()
	defer st.mu.RUnlock()
	return st.s
}

// Begin implements Claimer.
func (st *idemStore) Begin(ctx context.Context, key, fp string) (Attempt, error) {
	return beginOn(ctx, st.store(), key, fp)
}

// beginOn is Claimer's Begin on s.
func beginOn(ctx context.Context, s *idem.Store, key, fp string) (Attempt, error) {
	c, res, err := s.Begin(ctx, idem.Request{Key: key, Fingerprint: fp})
	// errors.Is rather than errors.As: a target variable for As escapes,
	// and would cost an allocation on every call, not only on errors.
	switch {
	case errors.Is(err, idem.ErrInProgress):
		return Attempt{Outcome: Busy}, nil
	case err != nil:
		return Attempt{}, err
	case res != nil:
		return Attempt{Outcome: Replayed, Saved: res.Body}, nil
	}
	return Attempt{Outcome: Claimed, handle: c}, nil
}

// Complete implements Claimer.
func (st *idemStore) Complete(ctx context.Context, key string, a Attempt, result []byte) error {
	return a.handle.(*idem.Claim).Complete(ctx, idem.Result{Status: 200, Body: result})
}

// Do implements Doer with Store.Do, the one-call helper.
func (st *idemStore) Do(ctx context.Context, key, fp string, fn func() []byte) ([]byte, bool, error) {
	res, replayed, err := st.store().Do(ctx, idem.Request{Key: key, Fingerprint: fp},
		func(context.Context) (idem.Result, error) { return idem.Result{Status: 200, Body: fn()}, nil })
	if errors.Is(err, idem.ErrInProgress) {
		return nil, false, errBusy
	}
	return res.Body, replayed, err
}

// Fill implements Dataset: it reopens the data for loading, runs a claim
// and a completion per key from many goroutines, and reopens it as the
// contender runs it. The records are the ones a durable store would hold;
// only the load skips the syncs.
func (st *idemStore) Fill(ctx context.Context, keys []string, result []byte) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if err := st.closeS(); err != nil {
		return err
	}
	fast, closeFast, err := st.open(true)
	if err != nil {
		return err
	}
	err = forEachKey(keys, func(k string) error {
		c, _, err := fast.Begin(ctx, idem.Request{Key: k, Fingerprint: benchFP})
		if err == nil && c == nil {
			err = fmt.Errorf("fill: key %q was not absent", k)
		}
		if err == nil {
			err = c.Complete(ctx, idem.Result{Status: 200, Body: result})
		}
		return err
	})
	if cerr := closeFast(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	st.s, st.closeS, err = st.open(false)
	return err
}

// Abandon implements Dataset: it claims every key and never completes
// the claims. When the Badger store is closed (after CloseTimeout) and
// opened again, the new store knows them for orphans; on PostgreSQL their
// short lease ends. The claims are taken from many goroutines, so that
// they share commits, as the peers insert theirs in one transaction.
func (st *idemStore) Abandon(ctx context.Context, keys []string) error {
	s := st.store()
	return forEachKey(keys, func(k string) error {
		c, _, err := s.Begin(ctx, idem.Request{Key: k, Fingerprint: benchFP, Lease: st.abandonLease})
		if err != nil {
			return err
		}
		if c == nil {
			return fmt.Errorf("abandon: key %q was not absent", k)
		}
		return nil
	})
}

// forEachKey calls fn on every key from 4×GOMAXPROCS goroutines and
// returns the first error, after which no more keys are started.
func forEachKey(keys []string, fn func(k string) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for range min(len(keys), 4*runtime.GOMAXPROCS(0)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(keys) {
					return
				}
				if err := fn(keys[i]); err != nil {
					once.Do(func() { first = err })
					next.Store(int64(len(keys)))
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// Sweep implements Dataset with Store.Sweep; the store's Resolver answers
// VerdictCommitted.
func (st *idemStore) Sweep(ctx context.Context, result []byte) (int, error) {
	rep, err := st.store().Sweep(ctx)
	return rep.Committed, err
}

// Close implements Store.
func (st *idemStore) Close() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.closeS()
}

// Store returns the underlying store, for the HTTP workload.
func (st *idemStore) Store() *idem.Store { return st.store() }
