package redisstore_test

// The failover test kills the primary of a replication group under load
// and lets Sentinel promote the replica. Several Stores, each with its own
// go-redis failover client, call Do on one sequence of keys, all of them
// on each key; an effect adds "key token" to a ledger the Resolver
// answers from. The test SIGKILLs the primary, waits until the Sentinels
// name the replica, restarts the old primary and waits until the primary
// has its replica in sync again, lets the Stores run on and, for longer
// runs, kills again. At the end it reads every acknowledged key back: a key that
// is not done with the body acknowledged is lost; a key with two ledger
// lines ran twice; a token that two claims received is a repeat.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/redisstore"
	"github.com/idemkit/idem/redisstore/redistest"
)

// failoverRun is what one run found.
type failoverRun struct {
	kills, acked, lost, twice, repeats, claims, errs int
	failover                                         []time.Duration // kill to a primary that answers
}

// failoverLedger is every effect that ran, and every claim made.
type failoverLedger struct {
	mu      sync.Mutex
	effects map[string][]uint64 // by key: the tokens whose effect ran
	claims  map[uint64]int      // by token: the claims given it
	acks    map[string][]string // by key: the bodies Do returned
}

func (l *failoverLedger) committed(key string, token uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, t := range l.effects[key] {
		if t == token {
			return true
		}
	}
	return false
}

func runFailover(t *testing.T, replicas, kills, workers int) failoverRun {
	// Sentinel judges a primary down after 2 s without an answer: on a
	// loaded machine 1 s makes it fail over from a live one too.
	g, err := redistest.StartGroup(ctx, &redistest.GroupOptions{DownAfter: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Stop)
	const scope = "failover"
	l := &failoverLedger{effects: map[string][]uint64{}, claims: map[uint64]int{}, acks: map[string][]string{}}
	resolver := idem.ResolverFunc(func(_ context.Context, rec *idem.Record) (idem.Resolution, error) {
		if l.committed(rec.Key, rec.Token) {
			return idem.Resolution{Verdict: idem.VerdictCommitted, Result: crashResult(rec.Key, rec.Token)}, nil
		}
		return idem.Resolution{Verdict: idem.VerdictNotCommitted}, nil
	})
	observer := idem.ObserverFunc(func(e idem.Event) {
		if e.Kind == idem.EventClaimed {
			l.mu.Lock()
			l.claims[e.Token]++
			l.mu.Unlock()
		}
	})
	effect := func(ctx context.Context) (idem.Result, error) {
		c, _ := idem.ClaimFromContext(ctx)
		l.mu.Lock()
		l.effects[c.Key()] = append(l.effects[c.Key()], c.Token())
		l.mu.Unlock()
		return crashResult(c.Key(), c.Token()), nil
	}
	var run failoverRun
	var mu sync.Mutex // guards run.errs
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		c := g.FailoverClient()
		t.Cleanup(func() { _ = c.Close() })
		b, err := redisstore.New(ctx, c, &redisstore.Options{Prefix: "fo", Replicas: replicas})
		if err != nil {
			t.Fatal(err)
		}
		store := idem.New(b, &idem.Options{Lease: time.Second, Retention: time.Hour, Resolver: resolver,
			Owner: "w" + strconv.Itoa(w), Observer: observer, SweepInterval: 500 * time.Millisecond})
		t.Cleanup(func() { _ = store.Close() })
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				key := fmt.Sprintf("k-%06d", n)
				for {
					select {
					case <-stop:
						return
					default:
					}
					cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
					res, _, err := store.Do(cctx, idem.Request{Scope: scope, Key: key, Fingerprint: "fp"}, effect)
					cancel()
					if err == nil {
						l.mu.Lock()
						l.acks[key] = append(l.acks[key], string(res.Body))
						l.mu.Unlock()
						break
					}
					if !errors.Is(err, idem.ErrInProgress) {
						mu.Lock()
						run.errs++
						mu.Unlock()
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
		}()
	}
	time.Sleep(time.Second)
	for range kills {
		old, err := g.Primary(ctx)
		if err != nil {
			t.Fatal(err)
		}
		killed := time.Now()
		old.Kill()
		run.kills++
		if _, err := g.WaitFailover(ctx, old, 60*time.Second); err != nil {
			t.Fatal(err)
		}
		run.failover = append(run.failover, time.Since(killed))
		if err := old.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		// The old primary comes back as a replica, in sync, before the
		// next kill: each kill finds a replica that follows.
		if _, err := g.WaitSynced(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second) // the Stores run on the new primary
	}
	close(stop)
	wg.Wait()

	// Read back what was acknowledged, on the primary now, once every open
	// claim has been recovered.
	c := g.FailoverClient()
	defer c.Close()
	b, err := redisstore.New(ctx, c, &redisstore.Options{Prefix: "fo"})
	if err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for key, bodies := range l.acks {
		run.acked++
		rec, err := b.Get(ctx, scope, key)
		if err != nil || rec.State != idem.StateDone {
			run.lost++
			t.Logf("lost: %s acknowledged %q, now %v %v", key, bodies, rec, err)
			continue
		}
		for _, body := range bodies {
			if string(rec.Result.Body) != body {
				run.lost++
				t.Logf("lost: %s acknowledged %q, now holds %q", key, body, rec.Result.Body)
				break
			}
		}
	}
	for key, toks := range l.effects {
		if len(toks) > 1 {
			run.twice++
			t.Logf("twice: %s ran with tokens %v", key, toks)
		}
	}
	for tok, n := range l.claims {
		run.claims += n
		if n > 1 {
			run.repeats++
			t.Logf("repeat: token %d given to %d claims", tok, n)
		}
	}
	return run
}

// TestFailover_Sentinel kills the primary (IDEM_REDIS_FAILOVER times per
// setting, default 1) under four Stores, with and without WAIT on the
// replica. With WAIT (Options.Replicas 1, every replica) nothing
// acknowledged is lost and nothing runs twice; without it, what is lost is
// reported. Tokens never repeat in either.
func TestFailover_Sentinel(t *testing.T) {
	needServer(t)
	kills := 1
	if v := os.Getenv("IDEM_REDIS_FAILOVER"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatal(err)
		}
		kills = n
	}
	for _, replicas := range []int{1, 0} {
		t.Run(fmt.Sprintf("Replicas=%d", replicas), func(t *testing.T) {
			run := runFailover(t, replicas, kills, 4)
			t.Logf("Replicas=%d: kills %d, acknowledged %d, lost %d, twice %d, claims %d, token repeats %d, errors %d, failovers %v",
				replicas, run.kills, run.acked, run.lost, run.twice, run.claims, run.repeats, run.errs, run.failover)
			if run.acked == 0 {
				t.Fatal("nothing acknowledged")
			}
			if run.repeats != 0 {
				t.Errorf("%d tokens repeated", run.repeats)
			}
			if replicas > 0 && (run.lost != 0 || run.twice != 0) {
				t.Errorf("with WAIT on every replica: %d lost, %d twice", run.lost, run.twice)
			}
		})
	}
}
