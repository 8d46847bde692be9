package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// sustainedGoroutines is the sustained-write workload's concurrency: a
// few request handlers, as a small tool server has.
const sustainedGoroutines = 4

// sustainedResultSize is the size of each cycle's saved result.
const sustainedResultSize = 1 << 10

// sustainedSample is one point of a sustained run's memory over time.
// Sizes are bytes; Heap is the live Go heap (HeapAlloc right after a GC).
type sustainedSample struct {
	Cycles  int     `json:"cycles"`
	Seconds float64 `json:"seconds"`
	RSS     int64   `json:"rss"`
	Anon    int64   `json:"anon"`
	File    int64   `json:"file"`
	Heap    int64   `json:"heap"`
}

// sustainedReport is what a sustained child measured, as JSON on its
// standard output. PeakAnon and PeakRSS come from /proc/self/status read
// every 100 ms, so they catch the peaks between samples; HWM is VmHWM.
type sustainedReport struct {
	Cycles            int               `json:"cycles"`
	Seconds           float64           `json:"seconds"`
	Samples           []sustainedSample `json:"samples"`
	PeakAnon, PeakRSS int64
	HWM               int64
	// AfterClose is resident memory after Close, a GC and FreeOSMemory.
	AfterCloseRSS, AfterCloseAnon int64
}

// sustainedContender reports whether a contender runs the sustained
// workload: idem's durable stores and the durable embedded peers, each
// store once (not its other durability modes).
func sustainedContender(c Contender) bool {
	switch {
	case !c.Portable || !c.Durable || c.Kind == "limit":
		return false
	case c.Kind == "idem":
		return true
	}
	return c.SameData == ""
}

// sustained runs Plan.SustainedCycles durable claim+complete cycles with
// 1 KiB results at sustainedGoroutines goroutines in a child process per
// contender, sampling its memory every Plan.SustainedEvery cycles: what an
// embedded store holds in its host's memory under a steady stream of
// writes, which the short timed workloads do not reach.
func (s *Suite) sustained(ctx context.Context) error {
	about := fmt.Sprintf("%s durable claim+complete cycles on fresh keys with %d-byte results (JSON, half of it "+
		"per-key random), %d goroutines, in a child process per contender; memory read from /proc/self/status "+
		"every 100 ms (peaks) and every %s cycles with the live Go heap after a GC (samples); steady is the median "+
		"of the samples in the second half of the run", groupThousands(fmt.Sprint(s.plan.SustainedCycles)),
		sustainedResultSize, sustainedGoroutines, groupThousands(fmt.Sprint(s.plan.SustainedEvery)))
	ws := []Workload{
		{ID: "sustained-rate", Title: "Sustained writes: cycles per second", Unit: "cycles/s", Higher: true},
		{ID: "sustained-anon-peak", Title: "Sustained writes: peak anonymous memory (RssAnon)", Unit: "MiB"},
		{ID: "sustained-anon-steady", Title: "Sustained writes: steady anonymous memory (RssAnon)", Unit: "MiB"},
		{ID: "sustained-file-steady", Title: "Sustained writes: steady file-backed memory (RssFile)", Unit: "MiB"},
		{ID: "sustained-rss-peak", Title: "Sustained writes: peak resident memory (VmHWM)", Unit: "MiB"},
		{ID: "sustained-heap-peak", Title: "Sustained writes: largest live Go heap of the samples", Unit: "MiB"},
	}
	ids := make([]string, len(ws))
	for i, w := range ws {
		w.About, w.Reference = about, "idem"
		s.addWorkload(w)
		ids[i] = w.ID
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	for _, c := range s.contenders {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !sustainedContender(c) || s.skip(c, ids...) {
			continue
		}
		start := time.Now()
		r, err := s.sustainedRep(ctx, exe, c)
		if err != nil {
			for _, id := range ids {
				s.add(id, c.Name, 0, nil, err)
			}
			s.logf("  sustained %-15s error: %v", c.Name, err)
			continue
		}
		s.addSustained(c, r)
		s.logf("  sustained %-15s %.0f cycles/s, peak RssAnon %.0f MiB, VmHWM %.0f MiB (%.1fs)", c.Name,
			float64(r.Cycles)/r.Seconds, mib(r.PeakAnon), mib(r.HWM), time.Since(start).Seconds())
	}
	return ctx.Err()
}

// sustainedRep runs one contender's child process on a fresh directory.
func (s *Suite) sustainedRep(ctx context.Context, exe string, c Contender) (*sustainedReport, error) {
	dir, err := os.MkdirTemp(s.tmp, c.Name+"-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	s.quiesce(ctx)
	// A slow durable peer takes half an hour for a million cycles here.
	ctx, cancel := context.WithTimeout(ctx, 3*time.Hour)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, "-child=sustained", "-contender="+c.Name,
		fmt.Sprintf("-n=%d", s.plan.SustainedCycles), fmt.Sprintf("-every=%d", s.plan.SustainedEvery), "-dir="+dir)
	cmd.Env = append(os.Environ(), s.servers.env()...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("child: %v: %s", err, lastLines(stderr.Bytes()))
	}
	var r sustainedReport
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		return nil, fmt.Errorf("child output: %v: %s", err, lastLines(stdout.Bytes()))
	}
	if r.Cycles != s.plan.SustainedCycles || len(r.Samples) == 0 {
		return nil, fmt.Errorf("child ran %d cycles with %d samples, want %d", r.Cycles, len(r.Samples), s.plan.SustainedCycles)
	}
	return &r, nil
}

// addSustained records a child's figures; the samples go with the peak
// anonymous memory, for the report's table and chart.
func (s *Suite) addSustained(c Contender, r *sustainedReport) {
	steady := r.Samples[len(r.Samples)/2:]
	med := func(f func(sustainedSample) int64) float64 {
		xs := make([]float64, len(steady))
		for i, p := range steady {
			xs[i] = mib(f(p))
		}
		return median(xs)
	}
	var heapPeak int64
	for _, p := range r.Samples {
		heapPeak = max(heapPeak, p.Heap)
	}
	s.add("sustained-rate", c.Name, float64(r.Cycles)/r.Seconds, map[string]any{"seconds": r.Seconds}, nil)
	s.add("sustained-anon-peak", c.Name, mib(r.PeakAnon), map[string]any{"samples": r.Samples,
		"after_close_anon_mib": mib(r.AfterCloseAnon), "after_close_rss_mib": mib(r.AfterCloseRSS)}, nil)
	s.add("sustained-anon-steady", c.Name, med(func(p sustainedSample) int64 { return p.Anon }), nil, nil)
	s.add("sustained-file-steady", c.Name, med(func(p sustainedSample) int64 { return p.File }), nil, nil)
	s.add("sustained-rss-peak", c.Name, mib(max(r.HWM, r.PeakRSS)), nil, nil)
	s.add("sustained-heap-peak", c.Name, mib(heapPeak), nil, nil)
}

// sustainedSamples returns the samples a measurement's details hold, as
// the suite recorded them or as results.json gives them back.
func sustainedSamples(m *Measurement) []sustainedSample {
	if m == nil {
		return nil
	}
	per := perRep(m)
	if len(per) == 0 {
		return nil
	}
	switch v := per[len(per)-1]["samples"].(type) {
	case []sustainedSample:
		return v
	case nil:
		return nil
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return nil
		}
		var out []sustainedSample
		if json.Unmarshal(b, &out) != nil {
			return nil
		}
		return out
	}
}

// sustainedResult returns the i-th cycle's 1 KiB result: a JSON answer
// whose first half is the same in every result and whose second half is
// random per key, so that it compresses about as well as a real tool
// result does (2-3×), neither as well as a repeated constant nor not at
// all.
func sustainedResult(seed uint64, i int) []byte {
	const head = `{"object":"refund","status":"succeeded","currency":"eur","amount":4200,` +
		`"reason":"requested_by_customer","metadata":{"order":"ord_1234567890","agent":"support-bot",` +
		`"tool":"refund.create"},"description":"`
	const filler = "Refund of order ord_1234567890 issued by the support agent after the customer's request. "
	const tail = `","token":"`
	const b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	out := make([]byte, 0, sustainedResultSize)
	out = append(out, head...)
	for len(out) < sustainedResultSize/2-len(tail) {
		out = append(out, filler[len(out)%len(filler)])
	}
	out = append(out, tail...)
	x := seed ^ uint64(i)
	for len(out) < sustainedResultSize-2 {
		x = splitmix(x)
		for k := 0; k < 10 && len(out) < sustainedResultSize-2; k++ {
			out = append(out, b64[(x>>(6*k))&63])
		}
	}
	return append(out, '"', '}')
}

// sustainedChild is the child process's side: it opens the contender on
// an empty directory, runs the cycles, samples memory, closes the store
// and prints a sustainedReport.
func sustainedChild(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("sustained", flag.ContinueOnError)
	name := fs.String("contender", "", "contender name")
	n := fs.Int("n", 0, "cycles")
	every := fs.Int("every", 50_000, "cycles between samples")
	dir := fs.String("dir", "", "the store's directory")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var c *Contender
	for _, k := range allContenders(childServers()) {
		if k.Name == *name {
			c = &k
		}
	}
	if c == nil || c.Open == nil {
		return fmt.Errorf("no contender %q to run", *name)
	}
	st, err := c.Open(ctx, *dir)
	if err != nil {
		return err
	}
	cl, ok := st.(Claimer)
	if !ok {
		st.Close()
		return naError("no claim protocol")
	}
	r := &sustainedReport{}
	stopPeaks := watchPeaks(r)
	err = sustainedCycles(ctx, cl, *n, max(1, *every), r)
	stopPeaks()
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	ps := procStatus()
	r.HWM = ps["VmHWM"]
	settle()
	ps = procStatus()
	r.AfterCloseRSS, r.AfterCloseAnon = ps["VmRSS"], ps["RssAnon"]
	return json.NewEncoder(os.Stdout).Encode(r)
}

// watchPeaks reads the process's memory every 100 ms into r's peaks until
// the returned function is called.
func watchPeaks(r *sustainedReport) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	look := func() {
		ps := procStatus()
		r.PeakAnon, r.PeakRSS = max(r.PeakAnon, ps["RssAnon"]), max(r.PeakRSS, ps["VmRSS"])
	}
	go func() {
		defer wg.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				look()
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
		look()
	}
}

// sustainedCycles runs n claim+complete cycles on fresh keys from
// sustainedGoroutines goroutines, sampling memory after every every-th.
func sustainedCycles(ctx context.Context, cl Claimer, n, every int, r *sustainedReport) error {
	seed := newSeed()
	var (
		next, done atomic.Int64
		sampleMu   sync.Mutex
		errOnce    sync.Once
		first      error
		wg         sync.WaitGroup
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	sample := func(cycles int) {
		sampleMu.Lock()
		defer sampleMu.Unlock()
		// Resident memory first, so that the GC below does not lower it.
		ps := procStatus()
		p := sustainedSample{Cycles: cycles, Seconds: time.Since(start).Seconds(),
			RSS: ps["VmRSS"], Anon: ps["RssAnon"], File: ps["RssFile"]}
		runtime.GC()
		p.Heap = heapAlloc()
		r.Samples = append(r.Samples, p)
	}
	for range sustainedGoroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				k := keyOf(seed, i)
				err := claimComplete(ctx, cl, k, sustainedResult(seed, i))
				if err != nil {
					errOnce.Do(func() { first = err })
					cancel()
					return
				}
				if d := int(done.Add(1)); d%every == 0 || d == n {
					sample(d)
				}
			}
		}()
	}
	wg.Wait()
	r.Seconds = time.Since(start).Seconds()
	r.Cycles = int(done.Load())
	sampleMu.Lock()
	defer sampleMu.Unlock()
	// The samples of different goroutines may land out of order.
	slices.SortFunc(r.Samples, func(a, b sustainedSample) int { return cmp.Compare(a.Cycles, b.Cycles) })
	return first
}
