package idem_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/badgerstore"
)

// BenchmarkClaimComplete measures one claim plus one completion on a fresh
// key, the cost idem adds to every first request, for each durability mode
// at 1 and 32 goroutines. Compare with the figures in DESIGN.md: the synced
// rate is bounded by the disk's fdatasync rate.
func BenchmarkClaimComplete(b *testing.B) {
	res := idem.Result{Status: 201, Body: []byte(`{"refund":"re_123","amount":4200}`)}
	key := func(i int) string { return "k" + strconv.Itoa(i) }
	for _, d := range []idem.Durability{idem.Durable, idem.Fast} {
		for _, g := range []int{1, 32} {
			b.Run(fmt.Sprintf("%s/goroutines=%d", d, g), func(b *testing.B) {
				benchCycles(b, d, g, key, "fp", res)
			})
		}
	}
}

// BenchmarkClaimComplete_RealisticSizes is BenchmarkClaimComplete (durable)
// with the sizes the side-by-side suite in bench/ uses: 36-character keys
// in random order (UUID-shaped), a full fingerprint and a 90-byte result.
// Random keys spread every level-0 table of Badger over the whole key space
// and the records are larger: a cycle costs about 30% more CPU than with
// short sequential keys.
func BenchmarkClaimComplete_RealisticSizes(b *testing.B) {
	res := idem.Result{Status: 200,
		Body: []byte(`{"refund":"re_3PqNXk2eZvKYlo2C","status":"succeeded","amount":4200,"currency":"eur"}`)}
	fp, err := idem.Fingerprinter{}.Sum("POST", "/refunds", "application/json", []byte(`{"charge":"ch_1","amount":4200}`))
	if err != nil {
		b.Fatal(err)
	}
	key := func(i int) string {
		return uuid.NewSHA1(uuid.NameSpaceOID, []byte(strconv.Itoa(i))).String()
	}
	for _, g := range []int{1, 32} {
		b.Run(fmt.Sprintf("goroutines=%d", g), func(b *testing.B) {
			benchCycles(b, idem.Durable, g, key, fp, res)
		})
	}
}

// benchCycles runs b.N claim+complete cycles on the fresh keys key(i) from
// g goroutines, on a new store of durability d, and reports cycles/s.
func benchCycles(b *testing.B, d idem.Durability, g int, key func(int) string, fp string, res idem.Result) {
	s, err := idem.Open(b.TempDir(), &idem.Options{Durability: d, SweepInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	b.ReportAllocs()
	b.ResetTimer()
	cpu := processCPU()
	runSplit(b, g, func(i int) {
		c, _, err := s.Begin(context.Background(), idem.Request{Key: key(i), Fingerprint: fp})
		if err != nil {
			b.Error(err)
			return
		}
		if err := c.Complete(context.Background(), res); err != nil {
			b.Error(err)
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cycles/s")
	// CPU per cycle counts the work a cycle causes, background flushes and
	// compactions included, and moves far less with the machine's noise
	// than the rate does.
	b.ReportMetric(float64(processCPU()-cpu)/float64(b.N)/1e3, "cpu-µs/op")
}

// BenchmarkReplay measures a repeat of a completed key: the replay path.
func BenchmarkReplay(b *testing.B) {
	for _, g := range []int{1, 32} {
		b.Run(fmt.Sprintf("goroutines=%d", g), func(b *testing.B) {
			s, err := idem.Open(b.TempDir(), &idem.Options{SweepInterval: -1})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			const keys = 1000
			body := []byte(`{"refund":"re_123","amount":4200,"currency":"EUR","status":"succeeded"}`)
			for i := range keys {
				_, _, err := s.Do(context.Background(), idem.Request{Key: "k" + strconv.Itoa(i), Fingerprint: "fp"},
					func(context.Context) (idem.Result, error) { return idem.Result{Status: 201, Body: body}, nil })
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			runSplit(b, g, func(i int) {
				_, res, err := s.Begin(context.Background(), idem.Request{Key: "k" + strconv.Itoa(i%keys), Fingerprint: "fp"})
				if err != nil || res == nil {
					b.Errorf("replay: %v", err)
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "replays/s")
		})
	}
}

// BenchmarkReplay_Scattered replays many done keys in a scattered order,
// as bench/'s replay workload does: 20,000 keys, loaded through a store of
// their own (Fast, then closed) so that the replaying store, a durable
// one, starts as after a restart, then read once each before timing so
// that the figures are the steady state. A stride coprime with the key
// count visits every key, never two neighbours in a row. Replays are
// counted, as they are by default.
func BenchmarkReplay_Scattered(b *testing.B) {
	const n = 20_000
	dir := b.TempDir()
	keys := loadDone(b, dir, n)
	s, err := idem.Open(dir, &idem.Options{SweepInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	replay := func(i int) error {
		_, res, err := s.Begin(context.Background(), idem.Request{Key: keys[(i*7919)%n], Fingerprint: replayFP})
		if err == nil && res == nil {
			err = fmt.Errorf("key %d claimed", (i*7919)%n)
		}
		return err
	}
	for i := range n {
		if err := replay(i); err != nil {
			b.Fatal(err)
		}
	}
	for _, g := range []int{1, 32} {
		b.Run(fmt.Sprintf("goroutines=%d", g), func(b *testing.B) {
			b.ReportAllocs()
			b.ResetTimer()
			runSplit(b, g, func(i int) {
				if err := replay(i); err != nil {
					b.Error(err)
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "replays/s")
		})
	}
}

// BenchmarkOpenEmpty reports the heap an empty open store holds, the cost
// of embedding idem before any request arrives (target: under 16 MiB).
func BenchmarkOpenEmpty(b *testing.B) {
	var heap uint64
	for range b.N {
		dir := b.TempDir()
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		s, err := idem.Open(dir, &idem.Options{SweepInterval: -1})
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		heap = after.HeapAlloc - min(before.HeapAlloc, after.HeapAlloc)
		b.StopTimer()
		_ = s.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(heap)/(1<<20), "heap-MiB")
}

// replayFP is the fingerprint of the replay benchmarks' requests.
const replayFP = "idemfp1-sha256:546e759a35dad4c7d310fb03280bbc89af10c154c5f7559c8760fbec3e3f3255"

// loadDone completes n keys, with a small JSON result, in a store at dir
// of their own (Fast, from several goroutines), then closes it, and
// returns the keys: the replay benchmarks open the store afresh, as after
// a restart.
func loadDone(b *testing.B, dir string, n int) []string {
	b.Helper()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = idem.KeyDeriver{}.Effect("bench", strconv.Itoa(i))
	}
	body := []byte(`{"refund":"re_3PqNXk2eZvKYlo2C","status":"succeeded","amount":4200,"currency":"eur"}`)
	load, err := idem.Open(dir, &idem.Options{Durability: idem.Fast, SweepInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	var fillErr atomic.Value
	runSplitN(len(keys), 4*runtime.GOMAXPROCS(0), func(i int) {
		c, _, err := load.Begin(context.Background(), idem.Request{Key: keys[i], Fingerprint: replayFP})
		if err == nil {
			err = c.Complete(context.Background(), idem.Result{Status: 200, Body: body})
		}
		if err != nil {
			fillErr.Store(err)
		}
	})
	if err := load.Close(); err != nil {
		b.Fatal(err)
	}
	if err, _ := fillErr.Load().(error); err != nil {
		b.Fatal(err)
	}
	return keys
}

// runSplit calls fn(i) for i in [0, b.N) from g goroutines.
func runSplit(b *testing.B, g int, fn func(i int)) { runSplitN(b.N, g, fn) }

// runSplitN calls fn(i) for i in [0, n) from g goroutines.
func runSplitN(n, g int, fn func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				fn(i)
			}
		}()
	}
	wg.Wait()
}

// BenchmarkReplay_Counting compares the replay path with and without the
// counting of replays (Record.Replays): counts are gathered in memory and
// flushed in batches, so the rate must not fall. "off" hides the backend's
// Tallier (untallied), so nothing is counted; the Store's replay cache
// serves both, so that the two differ in counting only.
func BenchmarkReplay_Counting(b *testing.B) {
	for _, counting := range []bool{true, false} {
		name := "on"
		if !counting {
			name = "off"
		}
		b.Run(name, func(b *testing.B) {
			bb, err := badgerstore.Open(b.TempDir(), badgerstore.Options{})
			if err != nil {
				b.Fatal(err)
			}
			var kept backend.Backend = bb
			if !counting {
				kept = untallied{bb, noTallies{}}
			}
			if _, ok := kept.(backend.Tallier); ok != counting {
				b.Fatalf("the backend is a Tallier: %v", ok)
			}
			s := idem.New(kept, &idem.Options{SweepInterval: -1})
			defer s.Close()
			const keys = 1000
			for i := range keys {
				_, _, err := s.Do(context.Background(), idem.Request{Key: "k" + strconv.Itoa(i)},
					func(context.Context) (idem.Result, error) {
						return idem.Result{Status: 201, Body: []byte(`{"ok":true}`)}, nil
					})
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				if _, res, err := s.Begin(context.Background(), idem.Request{Key: "k" + strconv.Itoa(i%keys)}); err != nil || res == nil {
					b.Fatalf("replay: %v", err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "replays/s")
		})
	}
}

// untallied is a Badger backend that is not a backend.Tallier: the
// AddTallies of its two embedded fields, at one depth, hide each other.
// Every other method, exported or not, is the backend's.
type untallied struct {
	*badgerstore.Backend
	noTallies
}

type noTallies struct{}

func (noTallies) AddTallies() {}
