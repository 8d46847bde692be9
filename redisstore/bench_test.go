package redisstore_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/redisstore"
	"github.com/redis/go-redis/v9"
)

// The benchmarks set idem on Redis beside bare go-redis doing the same
// writes and reads on the shared server (appendfsync always): a cycle
// against SET NX GET and SET of a 200-byte value, an uncached replay
// against a GET. bench/ measures them in its report; these are for
// alternating runs of a change (docs/scale.md).

var benchKeys atomic.Int64

func benchParallel(b *testing.B, goroutines int, op func(ctx context.Context, n int64) error) {
	b.SetParallelism(max(1, goroutines/runtime.GOMAXPROCS(0)))
	defer costs(b)()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := op(ctx, benchKeys.Add(1)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func benchStore(b *testing.B) (*idem.Store, *redis.Client) {
	c := redis.NewClient(&redis.Options{Addr: needServer(b).Addr, PoolSize: 40})
	b.Cleanup(func() { _ = c.Close() })
	s := idem.New(newBackend(b, c, nil), &idem.Options{Retention: time.Hour, SweepInterval: -1})
	b.Cleanup(func() { _ = s.Close() })
	return s, c
}

var benchBody = make([]byte, 200)

func benchEffect(context.Context) (idem.Result, error) {
	return idem.Result{Status: 200, Body: benchBody}, nil
}

func BenchmarkDo_Cycle(b *testing.B) {
	for _, g := range []int{1, 32} {
		b.Run(fmt.Sprint("goroutines=", g), func(b *testing.B) {
			s, _ := benchStore(b)
			benchParallel(b, g, func(ctx context.Context, n int64) error {
				_, _, err := s.Do(ctx, idem.Request{Scope: "s", Key: fmt.Sprint("k", n), Fingerprint: "fp"}, benchEffect)
				return err
			})
		})
	}
}

func BenchmarkBare_Cycle(b *testing.B) {
	for _, g := range []int{1, 32} {
		b.Run(fmt.Sprint("goroutines=", g), func(b *testing.B) {
			_, c := benchStore(b)
			claim := make([]byte, 60)
			benchParallel(b, g, func(ctx context.Context, n int64) error {
				k := fmt.Sprint("bare:k", n)
				err := c.SetArgs(ctx, k, claim, redis.SetArgs{Mode: "NX", Get: true, TTL: time.Hour}).Err()
				if err != nil && err != redis.Nil {
					return err
				}
				return c.Set(ctx, k, benchBody, time.Hour).Err()
			})
		})
	}
}

// replayKeys is the number of done keys the replay benchmarks read.
const replayKeys = 2000

func BenchmarkDo_ReplayUncached(b *testing.B) {
	for _, g := range []int{1, 32} {
		b.Run(fmt.Sprint("goroutines=", g), func(b *testing.B) {
			s, c := benchStore(b)
			for i := range replayKeys {
				if _, _, err := s.Do(ctx, idem.Request{Scope: "s", Key: fmt.Sprint("k", i), Fingerprint: "fp"}, benchEffect); err != nil {
					b.Fatal(err)
				}
			}
			// Each replay goes through a Store of its own: no replay cache
			// has seen its key.
			fresh := make([]*idem.Store, 64)
			for i := range fresh {
				fresh[i] = idem.New(newBackend(b, c, &redisstore.Options{Prefix: s.Backend().(*redisstore.Backend).Prefix()}), &idem.Options{Retention: time.Hour, SweepInterval: -1})
				b.Cleanup(func() { _ = fresh[i].Close() })
			}
			var passes atomic.Int64
			benchParallel(b, g, func(ctx context.Context, n int64) error {
				st := fresh[(passes.Add(1)/replayKeys)%int64(len(fresh))]
				_, replayed, err := st.Do(ctx, idem.Request{Scope: "s", Key: fmt.Sprint("k", n%replayKeys), Fingerprint: "fp"}, benchEffect)
				if err == nil && !replayed {
					err = fmt.Errorf("key %d ran again", n%replayKeys)
				}
				return err
			})
		})
	}
}

func BenchmarkBare_Get(b *testing.B) {
	for _, g := range []int{1, 32} {
		b.Run(fmt.Sprint("goroutines=", g), func(b *testing.B) {
			_, c := benchStore(b)
			for i := range replayKeys {
				if err := c.Set(ctx, fmt.Sprint("bare:r", i), benchBody, time.Hour).Err(); err != nil {
					b.Fatal(err)
				}
			}
			benchParallel(b, g, func(ctx context.Context, n int64) error {
				return c.Get(ctx, fmt.Sprint("bare:r", n%replayKeys)).Err()
			})
		})
	}
}

// costs starts measuring the CPU time the server and this process spend;
// the function it returns reports both per operation. Unlike wall-clock
// time they hardly depend on what else the machine runs. The server's is
// INFO's used_cpu_sys and used_cpu_user (every client's: run one
// benchmark at a time).
func costs(b *testing.B) func() {
	c := redis.NewClient(&redis.Options{Addr: needServer(b).Addr})
	server0, client0 := serverCPU(b, c), clientCPU()
	return func() {
		defer c.Close()
		b.ReportMetric(float64(serverCPU(b, c)-server0)/1e3/float64(b.N), "server-CPU-us/op")
		b.ReportMetric(float64(clientCPU()-client0)/1e3/float64(b.N), "client-CPU-us/op")
	}
}

// serverCPU returns the CPU time, in nanoseconds, the server has used.
func serverCPU(b *testing.B, c *redis.Client) int64 {
	info, err := c.Info(ctx, "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		for _, f := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), f); ok {
				s, _ := strconv.ParseFloat(v, 64)
				total += s
			}
		}
	}
	return int64(total * 1e9)
}

// clientCPU returns the CPU time, in nanoseconds, this process has used.
func clientCPU() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}
