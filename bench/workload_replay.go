package main

import (
	"bytes"
	"context"
	"fmt"
)

// replayGoroutines returns the concurrencies of the replay workload.
func replayGoroutines() []int { return []int{1, 32} }

// replays measures repeats of done keys: Begin on a key whose result is
// saved returns that result. Each contender is loaded once with
// Plan.ReplayKeys done keys (Dataset.Fill), then read in every
// repetition, at each concurrency.
func (s *Suite) replays(ctx context.Context) error {
	var ids []string
	for _, g := range replayGoroutines() {
		id := fmt.Sprintf("replay-%d", g)
		ids = append(ids, id)
		s.addWorkload(Workload{ID: id, Title: fmt.Sprintf("Replay of done keys, %d goroutine(s)", g),
			About: fmt.Sprintf("one replay = Begin on one of %d done keys (random order), returning its saved result",
				s.plan.ReplayKeys),
			Unit: "replays/s", Higher: true, Reference: "idem"})
	}
	for _, c := range s.contenders {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if s.skip(c, ids...) {
			continue
		}
		if c.Kind == "limit" {
			for _, id := range ids {
				s.add(id, c.Name, 0, nil, naError("stores nothing to replay"))
			}
			continue
		}
		err := s.withStore(ctx, c, func(st Store) error {
			cl, ok := st.(Claimer)
			ds, ok2 := st.(Dataset)
			if !ok || !ok2 {
				return naError("stores nothing to replay")
			}
			keys := keysOf(newSeed(), s.plan.ReplayKeys)
			if err := ds.Fill(ctx, keys, benchResult); err != nil {
				return fmt.Errorf("fill: %w", err)
			}
			op := func(ctx context.Context, i int) error {
				// A stride coprime with the key count visits every key
				// in a scattered order.
				k := keys[(i*7919)%len(keys)]
				a, err := cl.Begin(ctx, k, benchFP)
				if err != nil {
					return err
				}
				if a.Outcome != Replayed || !bytes.Equal(a.Saved, benchResult) {
					return fmt.Errorf("key %q: outcome %d, %d bytes saved; want a replay of %d", k, a.Outcome,
						len(a.Saved), len(benchResult))
				}
				return nil
			}
			for rep := range s.plan.Reps {
				for j, g := range replayGoroutines() {
					s.quiesce(ctx)
					rate, err := run(ctx, g, s.plan.Warm, s.plan.Duration, s.plan.MaxOps, op)
					s.add(ids[j], c.Name, rate, nil, err)
					s.logf("  rep %d %-8s %-15s %10.0f replays/s", rep+1, ids[j], c.Name, rate)
				}
			}
			return nil
		})
		if err != nil {
			for _, id := range ids {
				s.add(id, c.Name, 0, nil, err)
			}
		}
	}
	return ctx.Err()
}
