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
			About: fmt.Sprintf("one replay = Begin on one of %d done keys (random order), returning its saved result. "+
				"idem-pg replays through its Store, whose replay cache (above every backend) answers a key it has "+
				"completed or read before from memory, as it does for idem on Badger: a key's first replay in the "+
				"Store reads PostgreSQL; idem-pg-uncached gives every pass over the keys a new Store on the same "+
				"table, so every replay reads PostgreSQL, as the replay of a key another instance completed does",
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
				return replayed(k, a, err)
			}
			fr, _ := st.(FreshReplayer)
			for rep := range s.plan.Reps {
				for j, g := range replayGoroutines() {
					s.quiesce(ctx)
					rate, err := run(ctx, g, s.plan.Warm, s.plan.Duration, s.plan.MaxOps, op)
					s.add(ids[j], c.Name, rate, nil, err)
					s.logf("  rep %d %-8s %-15s %10.0f replays/s", rep+1, ids[j], c.Name, rate)
					if fr != nil {
						name := c.Name + uncachedSuffix
						rate, err := s.freshReplays(ctx, g, fr, keys)
						s.add(ids[j], name, rate, nil, err)
						s.logf("  rep %d %-8s %-15s %10.0f replays/s", rep+1, ids[j], name, rate)
					}
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

// uncachedSuffix names the measurement of a FreshReplayer's replays that
// no cache of the Store answers.
const uncachedSuffix = "-uncached"

// FreshReplayer is implemented by idem on PostgreSQL, whose Store keeps a
// replay cache above the backend: a replay of a key the Store has
// completed or read before is answered from memory. Its uncached figure
// is a replay of a key that another instance completed.
type FreshReplayer interface {
	// FreshReplays returns a Begin whose every pass over the keys (pass =
	// call index / number of keys) runs on a Store that has not seen them,
	// and a function closing those Stores.
	FreshReplays(ctx context.Context) (begin func(ctx context.Context, pass int, key, fp string) (Attempt, error), done func() error)
}

// freshReplays runs the replay workload through fr: every replay is the
// key's first in its Store, read from the backend.
func (s *Suite) freshReplays(ctx context.Context, g int, fr FreshReplayer, keys []string) (float64, error) {
	begin, done := fr.FreshReplays(ctx)
	op := func(ctx context.Context, i int) error {
		k := keys[(i*7919)%len(keys)]
		a, err := begin(ctx, i/len(keys), k, benchFP)
		return replayed(k, a, err)
	}
	s.quiesce(ctx)
	rate, err := run(ctx, g, s.plan.Warm, s.plan.Duration, s.plan.MaxOps, op)
	if derr := done(); err == nil {
		err = derr
	}
	return rate, err
}

// replayed checks that Begin on the done key k answered with its saved
// result.
func replayed(k string, a Attempt, err error) error {
	if err != nil {
		return err
	}
	if a.Outcome != Replayed || !bytes.Equal(a.Saved, benchResult) {
		return fmt.Errorf("key %q: outcome %d, %d bytes saved; want a replay of %d", k, a.Outcome,
			len(a.Saved), len(benchResult))
	}
	return nil
}
