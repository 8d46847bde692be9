package main

import (
	"context"
	"fmt"
	"math/bits"
	"os"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// diskReplayContenders are the contenders of the replay-from-disk
// workload: idem at its default and at a 32 MiB memory budget (the
// budget sizes its caches), one durability mode of each embedded peer
// (a replay reads the same data in either), and the map as the ceiling.
// Servers keep their data out of the process and are measured uncached
// in the replay workload.
var diskReplayContenders = []string{"idem", "idem-budget32", "bbolt-update", "sqlite-full", "map"}

// diskFillChunk is how many keys the workload loads per Dataset.Fill
// call, so that a long load logs its progress.
const diskFillChunk = 250_000

// diskReplays measures replays of done keys that no cache of the process
// holds: each contender is loaded with Plan.DiskReplayKeys done keys
// (Dataset.Fill), then closed and opened again on the same directory
// before every measurement, and read at keys drawn uniformly at random.
func (s *Suite) diskReplays(ctx context.Context) error {
	var ids []string
	for _, g := range replayGoroutines() {
		id := fmt.Sprintf("replay-disk-%d", g)
		ids = append(ids, id)
		s.addWorkload(Workload{ID: id,
			Title: fmt.Sprintf("Replay from disk, %s done keys, %d goroutine(s)", sizeLabel(s.plan.DiskReplayKeys), g),
			About: fmt.Sprintf("one replay = Begin on one of %s done keys drawn uniformly at random (splitmix64 of the "+
				"replay's index, the same keys for every contender), returning its saved result. Each store is loaded "+
				"once (Dataset.Fill), then closed and opened again on the same directory before every measurement, so "+
				"that nothing is in the process's caches when it starts: idem's replay cache and Badger's memtables "+
				"are empty, bbolt maps its file again, SQLite opens new connections. After each open the "+
				"measurement waits until the process is idle (under a tenth of a core over 100 ms), so that the "+
				"compactions Badger starts on the load's tables when it opens are not measured. The operating system's page "+
				"cache is not dropped: the files were just written and stay in it for every store alike, so a read "+
				"that misses the process's caches costs CPU, not a disk read. The map keeps its data (it has no "+
				"disk) and is the ceiling. The other contenders are another durability mode of the same data, or "+
				"keep their data in a server", groupThousands(fmt.Sprint(s.plan.DiskReplayKeys))),
			Unit: "replays/s", Higher: true, Reference: "idem"})
	}
	for _, c := range s.contenders {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if s.skip(c, ids...) {
			continue
		}
		if why := diskReplayNA(c); why != "" {
			for _, id := range ids {
				s.add(id, c.Name, 0, nil, naError(why))
			}
			continue
		}
		if err := s.diskReplayRun(ctx, c, ids); err != nil {
			for _, id := range ids {
				s.add(id, c.Name, 0, nil, err)
			}
		}
	}
	return ctx.Err()
}

// diskReplayNA says why a contender is not in the replay-from-disk
// workload, or "".
func diskReplayNA(c Contender) string {
	switch {
	case slices.Contains(diskReplayContenders, c.Name):
		return ""
	case c.Kind == "limit":
		return "stores nothing to replay"
	case c.SameData != "":
		return "reads the same data as " + c.SameData
	}
	return "its data is not in a local directory"
}

// diskReplayRun loads one contender, then reopens it and measures before
// every measurement.
func (s *Suite) diskReplayRun(ctx context.Context, c Contender, ids []string) error {
	dir, err := os.MkdirTemp(s.tmp, c.Name+"-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	st, err := c.Open(ctx, dir)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer func() {
		if st != nil {
			st.Close()
		}
	}()
	ds, ok := st.(Dataset)
	if _, ok2 := st.(Claimer); !ok || !ok2 {
		return naError("stores nothing to replay")
	}
	keys := keysOf(newSeed(), s.plan.DiskReplayKeys)
	start := time.Now()
	for i := 0; i < len(keys); i += diskFillChunk {
		if err := ds.Fill(ctx, keys[i:min(i+diskFillChunk, len(keys))], benchResult); err != nil {
			return fmt.Errorf("fill: %w", err)
		}
		s.logf("  replay-disk %-15s loaded %d of %d keys in %.1fs", c.Name, min(i+diskFillChunk, len(keys)),
			len(keys), time.Since(start).Seconds())
	}
	floor, hasFloor := engineFloors[c.Name]
	var bkeys [][]byte
	if hasFloor {
		s.addContenderInfo(floor.info(c.Name))
		bkeys = make([][]byte, len(keys))
		for i, k := range keys {
			bkeys[i] = recordKey(k)
		}
	}
	for rep := range s.plan.Reps {
		for j, g := range replayGoroutines() {
			var openMs, idleMs float64
			if !volatile(st) {
				if st != nil {
					err := st.Close()
					st = nil
					if err != nil {
						return fmt.Errorf("close: %w", err)
					}
				}
				start := time.Now()
				if st, err = c.Open(ctx, dir); err != nil {
					return fmt.Errorf("reopen: %w", err)
				}
				openMs = ms(time.Since(start))
				// Badger compacts what the load left when it opens:
				// the measurement waits for it, as a serving store
				// would be past it.
				idleMs = ms(waitIdle(ctx, time.Minute))
			}
			s.quiesce(ctx) // what the close and the compactions wrote is not written back during the measurement
			cl := st.(Claimer)
			// Every measurement draws its own keys, the same for every
			// contender.
			seed := uint64(rep*len(replayGoroutines()) + j)
			op := func(ctx context.Context, i int) error {
				k := keys[uniform(seed, i, len(keys))]
				a, err := cl.Begin(ctx, k, benchFP)
				return replayed(k, a, err)
			}
			rate, per, err := runCosted(ctx, g, s.plan.Warm, s.plan.Duration, s.plan.MaxOps, op, "")
			if per == nil {
				per = map[string]any{}
			}
			per["open_ms"], per["idle_wait_ms"] = openMs, idleMs
			s.add(ids[j], c.Name, rate, per, err)
			s.logf("  rep %d %-14s %-15s %10.0f replays/s (reopen %.0f ms, then %.0f ms until idle)", rep+1, ids[j],
				c.Name, rate, openMs, idleMs)
			if hasFloor {
				// The engine's bare read of the same directory, right
				// after idem's, with the same keys.
				if err := st.Close(); err != nil {
					return fmt.Errorf("close: %w", err)
				}
				st = nil
				rate, detail, err := s.measureFloor(ctx, floor, dir, keys, bkeys, seed, g)
				s.add(ids[j], floor.name, rate, detail, err)
				s.logf("  rep %d %-14s %-15s %10.0f reads/s", rep+1, ids[j], floor.name, rate)
			}
		}
	}
	if st == nil {
		return nil
	}
	err = st.Close()
	st = nil
	return err
}

// uniform returns the i-th of a stream of indexes drawn uniformly from
// [0, n): splitmix64's stream (state i × its golden-ratio increment, on
// a base drawn from seed), scaled to n by a
// multiplication (Lemire's method, without its rejection step: the bias
// is below n/2^64). Being a function of the replay's index, it needs no
// state per goroutine and draws the same keys whichever goroutine runs
// which replay.
func uniform(seed uint64, i, n int) int {
	hi, _ := bits.Mul64(splitmix((seed<<32+uint64(i))*0x9e3779b97f4a7c15), uint64(n))
	return int(hi)
}

// waitIdle waits until the process uses less than a tenth of a core over
// 100 ms (a store's background work after it opened, such as Badger's
// compactions, is done), or limit has passed, and returns how long it
// waited.
func waitIdle(ctx context.Context, limit time.Duration) time.Duration {
	const window = 100 * time.Millisecond
	start := time.Now()
	for ctx.Err() == nil && time.Since(start) < limit {
		before := cpuTime()
		time.Sleep(window)
		if cpuTime()-before < window/10 {
			break
		}
	}
	return time.Since(start)
}

// cpuTime returns the CPU time the process has used, user and system.
func cpuTime() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
