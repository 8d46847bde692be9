package idem_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
)

// BenchmarkReplay_FromDisk replays done keys that no cache holds: 200,000
// keys (IDEM_BENCH_KEYS overrides), loaded through a store of their own
// (Fast, then closed), replayed uniformly at random by a store opened
// afresh, with the default memory budget and with 32 MiB, and the
// default background sweep (whose Maintain folds the counts). The replay
// cache fills as the benchmark goes, as it does in a host: the larger the
// share of keys it cannot hold, the more replays read Badger. Replays are
// counted, as they are by default, so the counts' flushes are in the
// figures; cpu-µs/op is the process's CPU time per replay, background
// work included, steadier than the rate on a shared machine. bench/'s
// replay-disk workload sets the same beside bbolt and
// SQLite.
func BenchmarkReplay_FromDisk(b *testing.B) {
	n := 200_000
	if v, err := strconv.Atoi(os.Getenv("IDEM_BENCH_KEYS")); err == nil && v > 0 {
		n = v
	}
	dir := b.TempDir()
	keys := loadDone(b, dir, n)
	for _, budget := range []int64{0, 32 << 20} {
		for _, g := range []int{1, 32} {
			name := fmt.Sprintf("budget=%dMiB/goroutines=%d", backend.MemoryBudget(budget)>>20, g)
			b.Run(name, func(b *testing.B) {
				s, err := idem.Open(dir, &idem.Options{MemoryBudget: budget})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				var seed atomic.Uint64
				var wg sync.WaitGroup
				var next atomic.Int64
				b.ReportAllocs()
				b.ResetTimer()
				cpu := processCPU()
				for range g {
					wg.Add(1)
					go func() {
						defer wg.Done()
						r := rand.New(rand.NewPCG(seed.Add(1), 7))
						for next.Add(1) <= int64(b.N) {
							k := keys[r.IntN(n)]
							_, res, err := s.Begin(context.Background(), idem.Request{Key: k, Fingerprint: replayFP})
							if err == nil && res == nil {
								err = fmt.Errorf("key %s claimed", k)
							}
							if err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
				b.StopTimer()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "replays/s")
				b.ReportMetric(float64(processCPU()-cpu)/float64(b.N)/1e3, "cpu-µs/op")
			})
		}
	}
}
