package main

import (
	"context"
	"errors"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// run calls op from g goroutines, first for warm without counting (pools
// connect, caches fill), then until d has passed or maxOps calls were
// made, whichever comes first, and returns the counted calls per second.
// Each call gets its own index i, from 0 up across both phases, so a
// workload that derives keys from i never repeats one. The first error
// stops the run and is returned.
func run(ctx context.Context, g int, warm, d time.Duration, maxOps int, op func(ctx context.Context, i int) error) (float64, error) {
	rate, _, err := runCosted(ctx, g, warm, d, maxOps, op, "")
	return rate, err
}

// runCosted is run that also returns what the counted calls cost, per call
// (perOp), with the disk holding dir; dir "" counts no disk.
func runCosted(ctx context.Context, g int, warm, d time.Duration, maxOps int,
	op func(ctx context.Context, i int) error, dir string) (float64, map[string]any, error) {
	var next atomic.Int64
	if warm > 0 {
		if _, _, err := phase(ctx, g, warm, max(1, maxOps/10), &next, op); err != nil {
			return 0, nil, err
		}
	}
	c0 := costNow(dir)
	n, elapsed, err := phase(ctx, g, d, maxOps, &next, op)
	c1 := costNow(dir)
	if err != nil {
		return 0, nil, err
	}
	if n == 0 {
		return 0, nil, errors.New("bench: no operation finished in time")
	}
	return float64(n) / elapsed.Seconds(), perOp(c0, c1, n), nil
}

// phase calls op from g goroutines until d has passed or maxOps calls
// were made, and returns how many finished and how long it took.
func phase(ctx context.Context, g int, d time.Duration, maxOps int, next *atomic.Int64,
	op func(ctx context.Context, i int) error) (int64, time.Duration, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		done    atomic.Int64
		stop    atomic.Bool
		errOnce sync.Once
		first   error
		wg      sync.WaitGroup
	)
	timer := time.AfterFunc(d, func() { stop.Store(true) })
	defer timer.Stop()
	limit := next.Load() + int64(maxOps)
	start := time.Now()
	for range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() && ctx.Err() == nil {
				i := next.Add(1) - 1
				if i >= limit {
					return
				}
				if err := op(ctx, int(i)); err != nil {
					errOnce.Do(func() { first = err })
					stop.Store(true)
					cancel()
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return done.Load(), time.Since(start), first
}

// median returns the median of xs (the mean of the middle two for an even
// count), or 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else {
		return (s[n/2-1] + s[n/2]) / 2
	}
}

// allocated returns the bytes a file occupies on disk (its blocks, as du
// counts them), which for sparse or preallocated files differs from its
// length.
func allocated(fi os.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return fi.Size()
}
