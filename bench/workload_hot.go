package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// hotKeys measures many goroutines hammering a few keys with repeated
// requests: Plan.HotGoroutines goroutines share Plan.HotKeys keys, and
// after every Plan.HotEpoch requests they move on to fresh keys, so each
// epoch has one execution per key, requests refused while it runs
// (retried after a short pause, as a client honouring Retry-After would),
// and replays. Every execution is counted per key: more than one for a
// key is a broken guarantee, reported as a violation.
func (s *Suite) hotKeys(ctx context.Context) error {
	id := fmt.Sprintf("hot-%dx%d", s.plan.HotGoroutines, s.plan.HotKeys)
	s.addWorkload(Workload{ID: id,
		Title: fmt.Sprintf("Hot keys: %d goroutines on %d keys, repeated requests", s.plan.HotGoroutines, s.plan.HotKeys),
		About: fmt.Sprintf("one request = Do (idem) or Begin/Complete (peers) on one of %d keys until answered "+
			"(executed or replayed; a busy key is retried after 50µs); keys change every %d requests; "+
			"exactly one execution per key is checked", s.plan.HotKeys, s.plan.HotEpoch),
		Unit: "requests/s", Higher: true, Reference: "idem"})
	for rep := range s.plan.Reps {
		for _, c := range s.contenders {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if s.skip(c, id) {
				continue
			}
			if c.Kind == "limit" {
				s.add(id, c.Name, 0, nil, naError("has no keys"))
				continue
			}
			var rate float64
			var detail map[string]any
			start := time.Now()
			err := s.withStore(ctx, c, func(st Store) error {
				var err error
				rate, detail, err = s.hotRun(ctx, st)
				return err
			})
			s.add(id, c.Name, rate, detail, err)
			s.logf("  rep %d %-8s %-15s %10.0f requests/s (%.2fs) %v", rep+1, id, c.Name, rate, time.Since(start).Seconds(), detail)
		}
	}
	return ctx.Err()
}

// hotRun is one repetition of the hot-key workload on an open store.
func (s *Suite) hotRun(ctx context.Context, st Store) (float64, map[string]any, error) {
	doer, isDoer := st.(Doer)
	cl, isClaimer := st.(Claimer)
	if !isDoer && !isClaimer {
		return 0, nil, naError("no claim protocol")
	}
	seed := newSeed()
	var (
		mu    sync.Mutex
		execs = map[string]int{} // executions per key; guarded by mu
	)
	execute := func(k string) []byte {
		mu.Lock()
		execs[k]++
		mu.Unlock()
		return benchResult
	}
	var replays, busy atomic.Int64
	op := func(ctx context.Context, i int) error {
		k := keyOf(seed, (i/s.plan.HotEpoch)*s.plan.HotKeys+i%s.plan.HotKeys)
		for {
			if err := ctx.Err(); err != nil {
				return err
			}
			var res []byte
			var replayed bool
			var err error
			if isDoer {
				res, replayed, err = doer.Do(ctx, k, benchFP, func() []byte { return execute(k) })
				if errors.Is(err, errBusy) {
					busy.Add(1)
					time.Sleep(50 * time.Microsecond)
					continue
				}
			} else {
				var a Attempt
				a, err = cl.Begin(ctx, k, benchFP)
				switch {
				case err != nil:
				case a.Outcome == Busy:
					busy.Add(1)
					time.Sleep(50 * time.Microsecond)
					continue
				case a.Outcome == Claimed:
					res = execute(k)
					err = cl.Complete(ctx, k, a, res)
				default:
					res, replayed = a.Saved, true
				}
			}
			if err != nil {
				return err
			}
			if !bytes.Equal(res, benchResult) {
				return fmt.Errorf("key %q answered %q", k, res)
			}
			if replayed {
				replays.Add(1)
			}
			return nil
		}
	}
	s.quiesce(ctx)
	rate, err := run(ctx, s.plan.HotGoroutines, s.plan.Warm, s.plan.Duration, s.plan.MaxOps, op)
	if err != nil {
		return 0, nil, err
	}
	mu.Lock()
	defer mu.Unlock()
	violations, executions := 0, 0
	for _, n := range execs {
		executions += n
		if n != 1 {
			violations++
		}
	}
	detail := map[string]any{"keys": len(execs), "executions": executions, "replays": replays.Load(),
		"busy_retries": busy.Load(), "violations": violations}
	if violations > 0 {
		return 0, detail, fmt.Errorf("exactly-once broken: %d of %d keys executed more than once", violations, len(execs))
	}
	return rate, detail, nil
}
