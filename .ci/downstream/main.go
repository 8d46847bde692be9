// Command downstream is what a user of idem builds: a program in a module
// of its own that requires github.com/idemkit/idem and nothing else of it.
// .ci/downstream.sh builds it outside the checkout and checks that the
// binary links idem's own copy of the engine. Run, it drives sustained
// Durable claim+complete cycles (4 goroutines, 1 KiB results, distinct
// keys) and prints the peak anonymous resident memory (RssAnon) it saw.
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
)

func main() {
	cycles := flag.Int("cycles", 20000, "claim+complete cycles in all")
	workers := flag.Int("workers", 4, "goroutines")
	dir := flag.String("dir", "", "store directory (default: a temporary one, removed after)")
	flag.Parse()
	if err := run(*dir, *cycles, *workers); err != nil {
		fmt.Fprintln(os.Stderr, "downstream:", err)
		os.Exit(1)
	}
}

func run(dir string, cycles, workers int) error {
	if dir == "" {
		d, err := os.MkdirTemp("", "idem-downstream-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	s, err := idem.Open(dir, &idem.Options{Durability: idem.Durable})
	if err != nil {
		return err
	}
	var peak atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() { // sample RssAnon every 100 ms
		defer close(sampled)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			if kb, ok := rssAnonKiB(); ok && kb > peak.Load() {
				peak.Store(kb)
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	body := bytes.Repeat([]byte("x"), 1<<10)
	var next atomic.Int64
	var firstErr error
	var errOnce sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(cycles) {
					return
				}
				key := fmt.Sprintf("downstream-%09d", i)
				_, replayed, err := s.Do(context.Background(), idem.Request{Key: key}, func(context.Context) (idem.Result, error) {
					return idem.Result{Status: 200, Body: body}, nil
				})
				if err == nil && replayed {
					err = fmt.Errorf("%s: a new key was replayed", key)
				}
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(stop)
	<-sampled
	if err := s.Close(); err != nil && firstErr == nil {
		firstErr = err
	}
	if firstErr != nil {
		return firstErr
	}
	fmt.Printf("cycles %d workers %d durable: %.0f cycles/s, peak RssAnon %.1f MiB\n",
		cycles, workers, float64(cycles)/elapsed.Seconds(), float64(peak.Load())/1024)
	return nil
}

// rssAnonKiB reads RssAnon from /proc/self/status (Linux).
func rssAnonKiB() (int64, bool) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "RssAnon:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}
