package main

import (
	"context"
	"fmt"
	"time"
)

// cycleGoroutines returns the concurrencies of the claim+complete workload.
func cycleGoroutines() []int { return []int{1, 32} }

// cycles measures claim+complete cycles on fresh keys: the cost of every
// first request. Each repetition opens a fresh store; repetitions of all
// contenders are interleaved, so that a burst of noise from the machine
// spreads over them rather than falling on one.
func (s *Suite) cycles(ctx context.Context) error {
	for _, g := range cycleGoroutines() {
		id := fmt.Sprintf("cycle-%d", g)
		s.addWorkload(Workload{ID: id, Title: fmt.Sprintf("Claim + complete on fresh keys, %d goroutine(s)", g),
			About: "one cycle = claim an absent key (durable before the effect would run) and save its ~90-byte result " +
				"(durable before the caller is answered); for the sync loops, one 4 KiB write + fdatasync, or one O_DIRECT|O_DSYNC 4 KiB write",
			Unit: "cycles/s", Higher: true, Reference: "idem"})
	}
	for rep := range s.plan.Reps {
		for _, g := range cycleGoroutines() {
			id := fmt.Sprintf("cycle-%d", g)
			for _, c := range s.contenders {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if s.skip(c, id) {
					continue
				}
				var rate float64
				var per map[string]any
				start := time.Now()
				err := s.withStore(ctx, c, func(st Store) error {
					op, err := cycleOp(st, newSeed())
					if err != nil {
						return err
					}
					s.quiesce(ctx)
					rate, per, err = runCosted(ctx, g, s.plan.Warm, s.plan.Duration, s.plan.MaxOps, op, s.tmp)
					return err
				})
				s.add(id, c.Name, rate, per, err)
				s.logf("  rep %d %-8s %-15s %10.0f cycles/s (%.2fs)", rep+1, id, c.Name, rate, time.Since(start).Seconds())
			}
		}
	}
	return ctx.Err()
}

// cycleOp returns one claim+complete cycle on the i-th fresh key.
func cycleOp(st Store, seed uint64) (func(context.Context, int) error, error) {
	if c, ok := st.(Cycler); ok {
		return func(ctx context.Context, i int) error { return c.Cycle(ctx, keyOf(seed, i)) }, nil
	}
	cl, ok := st.(Claimer)
	if !ok {
		return nil, naError("no claim protocol")
	}
	return func(ctx context.Context, i int) error { return claimComplete(ctx, cl, keyOf(seed, i), benchResult) }, nil
}

// claimComplete claims the fresh key k and saves result.
func claimComplete(ctx context.Context, cl Claimer, k string, result []byte) error {
	a, err := cl.Begin(ctx, k, benchFP)
	if err != nil {
		return err
	}
	if a.Outcome != Claimed {
		return fmt.Errorf("fresh key %q not claimed (outcome %d)", k, a.Outcome)
	}
	return cl.Complete(ctx, k, a, result)
}
