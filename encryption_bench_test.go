package idem_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/keyring"
)

// BenchmarkEncryption measures what Options.Keys costs: claim+complete
// cycles at 1 and 32 goroutines, a replay (from the replay cache, which
// holds results opened), and Store.Get, which reads the backend and opens
// the result every time. The store is the embedded one in memory, so that
// the CPU shows rather than the disk: the share encryption takes here is
// an upper bound of its share on a durable store. Each workload runs
// without keys and with them, side by side; run it several times and
// compare medians (bench/results/notes/encryption.md).
func BenchmarkEncryption(b *testing.B) {
	ring := newRing(b, testKey("bench", 1))
	body := []byte(`{"refund":"re_3PqNXk2eZvKYlo2C","status":"succeeded","amount":4200,"currency":"eur"}`)
	res := idem.Result{Status: 200, Body: body, Header: map[string][]string{"Content-Type": {"application/json"}}}
	modes := []struct {
		name string
		keys *keyring.Ring
	}{{"off", nil}, {"on", ring}}
	key := func(i int) string { return "k" + strconv.Itoa(i) }
	for _, g := range []int{1, 32} {
		b.Run(fmt.Sprintf("cycle/goroutines=%d", g), func(b *testing.B) {
			for _, m := range modes {
				b.Run(m.name, func(b *testing.B) {
					s := openBench(b, m.keys)
					b.ReportAllocs()
					b.ResetTimer()
					runSplit(b, g, func(i int) {
						c, _, err := s.Begin(bg, idem.Request{Key: key(i), Fingerprint: "fp"})
						if err == nil {
							err = c.Complete(bg, res)
						}
						if err != nil {
							b.Error(err)
						}
					})
					b.StopTimer()
					b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cycles/s")
				})
			}
		})
	}
	const keys = 1000
	for _, op := range []string{"replay", "get"} {
		b.Run(op, func(b *testing.B) {
			for _, m := range modes {
				b.Run(m.name, func(b *testing.B) {
					s := openBench(b, m.keys)
					for i := range keys {
						_, _, err := s.Do(bg, idem.Request{Key: key(i), Fingerprint: "fp"},
							func(context.Context) (idem.Result, error) { return res, nil })
						if err != nil {
							b.Fatal(err)
						}
					}
					b.ReportAllocs()
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						var err error
						if op == "replay" {
							_, _, err = s.Begin(bg, idem.Request{Key: key(i % keys), Fingerprint: "fp"})
						} else {
							_, err = s.Get(bg, "", key(i%keys))
						}
						if err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		})
	}
}

// openBench opens a store in memory with keys (nil for none).
func openBench(b *testing.B, keys *keyring.Ring) *idem.Store {
	return openStore(b, "", &idem.Options{Keys: keys})
}
