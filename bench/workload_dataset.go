package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// datasetReport is what a dataset child process measured, as JSON on its
// standard output. Sizes are bytes; -1 means not measured.
type datasetReport struct {
	// Resident memory (VmRSS) before the store opened, once it was open
	// and empty, and once it held the retained keys; VmHWM is the peak.
	RSSBase, RSSEmpty, RSS, HWM int64
	RSSAnon, RSSFile            int64
	// Go heap in use (after a GC) of the empty store, beyond the base,
	// and of the loaded store.
	HeapEmpty, Heap int64
	// ServerMem and ServerDisk are a server's figures (Footprinter).
	ServerMem, ServerDisk int64
	FootNote              string
	// Disk is the bytes the directory occupies after Close.
	Disk int64
	// FillSeconds is how long loading took (not a figure of the report).
	FillSeconds float64
	// OpenMs is how long the reopen took; SweepMs the sweep that followed,
	// which resolved Swept claims. SweepIdxMs and SweptIdx are the sweep
	// after Index, for stores with an Indexer; Indexed tells.
	OpenMs, SweepMs, SweepIdxMs float64
	Swept, SweptIdx             int
	Indexed, Volatile           bool
}

// sizeLabel names a retained-key count: 10k, 100k, 1M.
func sizeLabel(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

// datasets measures, for each size, each contender's resident memory and
// bytes on disk with that many retained keys, and how long a recovery
// sweep takes to find and resolve Plan.Stale stale claims among them.
// Each repetition runs in a child process of its own (this binary again),
// so that contenders do not share a heap or a page cache mapping.
// Contenders whose data is another's (the same store in another
// durability mode) are skipped.
func (s *Suite) datasets(ctx context.Context) error {
	sizes := []int{s.plan.SmallSize, s.plan.LargeSize}
	s.addWorkload(Workload{ID: "heap-empty", Title: "Go heap of an empty open store",
		About: "HeapAlloc after a GC, store open and empty, minus before it opened (child process); " +
			"modernc.org/sqlite allocates its memory outside the Go heap, so compare resident memory too",
		Unit: "MiB", Reference: "idem"})
	s.addWorkload(Workload{ID: "rss-empty", Title: "Resident memory of an empty open store",
		About: "VmRSS of the child process with the store open and empty, after a GC and FreeOSMemory",
		Unit:  "MiB", Reference: "idem"})
	for _, n := range sizes {
		l := sizeLabel(n)
		s.addWorkload(Workload{ID: "mem-" + l, Title: "Resident memory with " + l + " retained keys",
			About: "VmRSS of a child process holding the store with the keys (done records with their ~90-byte " +
				"results), after replaying 10,000 of them, a GC and FreeOSMemory. Stores kept in a directory are loaded " +
				"once and each repetition reopens a copy (a restarted process); the map and the servers are loaded in " +
				"each repetition; for servers the figure is the server's memory growth where known",
			Unit: "MiB", Reference: "idem"})
		s.addWorkload(Workload{ID: "mem-anon-" + l, Title: "Anonymous memory (RssAnon) with " + l + " retained keys",
			About: "the part of the figure above that is not backed by a file: heap, stacks, caches and allocator " +
				"buffers, which the host pays for (a store's mapped table files, RssFile, are page cache the kernel can " +
				"reclaim; see the next table)",
			Unit: "MiB", Reference: "idem"})
		s.addWorkload(Workload{ID: "mem-file-" + l, Title: "File-backed memory (RssFile) with " + l + " retained keys",
			About: "the part of the resident memory above that maps files: mapped tables and the binary itself",
			Unit:  "MiB", Reference: "idem"})
		s.addWorkload(Workload{ID: "disk-" + l, Title: "Bytes on disk per retained key, " + l + " keys",
			About: "blocks allocated under the store's directory after Close (du), divided by the keys; " +
				"for servers, the table's or append-only file's size",
			Unit: "bytes/key", Reference: "idem"})
		s.addWorkload(Workload{ID: "sweep-" + l,
			Title: fmt.Sprintf("Recovery sweep: %d stale claims among %s records", s.plan.Stale, l),
			About: "after a reopen, find the stale claims and resolve each as committed (idem: Store.Sweep with a Resolver " +
				"answering Committed; peers: SELECT ... WHERE state = in_progress AND lease_ends < now, then complete them), " +
				"without a secondary index",
			Unit: "ms", Reference: "idem"})
		s.addWorkload(Workload{ID: "sweep-idx-" + l,
			Title: fmt.Sprintf("Recovery sweep with an index: %d stale claims among %s records", s.plan.Stale, l),
			About: "as above, for peers after creating a partial index on lease_ends WHERE state = in_progress " +
				"(idem's figure is its only sweep: it always keeps its open claims apart)",
			Unit: "ms", Reference: "idem"})
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	for _, n := range sizes {
		l := sizeLabel(n)
		ids := []string{"mem-" + l, "mem-anon-" + l, "mem-file-" + l, "disk-" + l, "sweep-" + l, "sweep-idx-" + l}
		if n == s.plan.SmallSize {
			ids = append(ids, "heap-empty", "rss-empty")
		}
		var run []Contender
		for _, c := range s.contenders {
			why := ""
			switch {
			case c.Skip != "":
				s.skip(c, ids...)
				continue
			case c.Kind == "limit":
				why = "stores nothing"
			case c.SameData != "":
				why = "same data as " + c.SameData
			case !c.Portable && c.Kind == "idem" && n > s.plan.ServerLargeMax:
				why = fmt.Sprintf("loading %s keys through the public API (a claim and a completion each) "+
					"takes too long for this mode", l)
			}
			if why != "" {
				for _, id := range ids {
					s.add(id, c.Name, 0, nil, naError(why))
				}
				continue
			}
			run = append(run, c)
		}
		// Load each portable store once; every repetition gets a copy.
		seed := newSeed()
		loaded := map[string]string{}
		for _, c := range run {
			if !c.Portable {
				continue
			}
			dir, err := os.MkdirTemp(s.tmp, c.Name+"-loaded-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			start := time.Now()
			if _, err := s.runDatasetChild(ctx, exe, c, n, seed, dir, "load"); err != nil {
				for _, id := range ids {
					s.add(id, c.Name, 0, nil, fmt.Errorf("load: %w", err))
				}
				continue
			}
			s.logf("  loaded %s keys into %s in %.1fs", l, c.Name, time.Since(start).Seconds())
			loaded[c.Name] = dir
		}
		for rep := range s.plan.Reps {
			for _, c := range run {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				src, ok := loaded[c.Name]
				if c.Portable && !ok {
					continue // its load failed
				}
				start := time.Now()
				r, err := s.datasetRep(ctx, exe, c, n, seed, src)
				s.logf("  rep %d dataset %-5s %-15s %s (%.2fs)", rep+1, l, c.Name, r.summary(err), time.Since(start).Seconds())
				s.addDataset(c, n, ids, r, err)
			}
		}
	}
	return ctx.Err()
}

// datasetRep runs one repetition: on a copy of the loaded directory src
// for portable stores, or loading in the child for the others.
func (s *Suite) datasetRep(ctx context.Context, exe string, c Contender, n int, seed uint64, src string) (*datasetReport, error) {
	dir, err := os.MkdirTemp(s.tmp, c.Name+"-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	mode := "fill"
	if src != "" {
		if err := copyDir(src, dir); err != nil {
			return nil, fmt.Errorf("copy: %w", err)
		}
		mode = "loaded"
	}
	s.quiesce(ctx)
	return s.runDatasetChild(ctx, exe, c, n, seed, dir, mode)
}

// summary is a one-line account of a child's report, for the log.
func (r *datasetReport) summary(err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	return fmt.Sprintf("rss %.1f MiB, disk %.1f MiB, fill %.1fs, sweep %.1f ms (%d), indexed %.1f ms (%d)",
		mib(r.RSS), mib(r.Disk), r.FillSeconds, r.SweepMs, r.Swept, r.SweepIdxMs, r.SweptIdx)
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// addDataset records a child's figures.
func (s *Suite) addDataset(c Contender, n int, ids []string, r *datasetReport, err error) {
	if err != nil {
		for _, id := range ids {
			s.add(id, c.Name, 0, nil, err)
		}
		return
	}
	l := sizeLabel(n)
	detail := map[string]any{"vmhwm_mib": mib(r.HWM), "rss_anon_mib": mib(r.RSSAnon), "rss_file_mib": mib(r.RSSFile),
		"heap_mib": mib(r.Heap), "fill_s": r.FillSeconds, "open_ms": r.OpenMs}
	switch {
	case r.ServerMem >= 0:
		detail["note"] = r.FootNote
		s.add("mem-"+l, c.Name, mib(r.ServerMem), detail, nil)
	case r.FootNote != "":
		s.add("mem-"+l, c.Name, 0, nil, naError("memory is the server's, not measured"))
	default:
		s.add("mem-"+l, c.Name, mib(r.RSS), detail, nil)
	}
	if r.ServerMem >= 0 || r.FootNote != "" {
		s.add("mem-anon-"+l, c.Name, 0, nil, naError("memory is the server's"))
		s.add("mem-file-"+l, c.Name, 0, nil, naError("memory is the server's"))
	} else {
		s.add("mem-anon-"+l, c.Name, mib(r.RSSAnon), nil, nil)
		s.add("mem-file-"+l, c.Name, mib(r.RSSFile), nil, nil)
	}
	switch {
	case r.ServerDisk >= 0:
		s.add("disk-"+l, c.Name, float64(r.ServerDisk)/float64(n), map[string]any{"bytes": r.ServerDisk, "note": r.FootNote}, nil)
	case r.FootNote != "":
		s.add("disk-"+l, c.Name, 0, nil, naError("not measurable on this server"))
	case r.Volatile:
		s.add("disk-"+l, c.Name, 0, nil, naError("in memory"))
	default:
		s.add("disk-"+l, c.Name, float64(r.Disk)/float64(n), map[string]any{"bytes": r.Disk}, nil)
	}
	s.add("sweep-"+l, c.Name, r.SweepMs, map[string]any{"resolved": r.Swept, "open_ms": r.OpenMs}, nil)
	switch {
	case r.Indexed:
		s.add("sweep-idx-"+l, c.Name, r.SweepIdxMs, map[string]any{"resolved": r.SweptIdx}, nil)
	case c.Kind == "idem":
		s.add("sweep-idx-"+l, c.Name, r.SweepMs, map[string]any{"resolved": r.Swept, "note": "idem's only sweep"}, nil)
	default:
		s.add("sweep-idx-"+l, c.Name, 0, nil, naError("no secondary index in this store"))
	}
	if n == s.plan.SmallSize {
		if r.FootNote != "" {
			s.add("heap-empty", c.Name, 0, nil, naError("a server's client"))
			s.add("rss-empty", c.Name, 0, nil, naError("a server's client"))
		} else {
			s.add("heap-empty", c.Name, mib(r.HeapEmpty), nil, nil)
			s.add("rss-empty", c.Name, mib(r.RSSEmpty), nil, nil)
		}
	}
}

// runDatasetChild runs a child process on dir. mode is "load" (load the
// keys and close), "loaded" (measure a store loaded before) or "fill"
// (load, then measure).
func (s *Suite) runDatasetChild(ctx context.Context, exe string, c Contender, n int, seed uint64, dir, mode string) (*datasetReport, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, "-child=dataset", "-contender="+c.Name, fmt.Sprintf("-n=%d", n),
		fmt.Sprintf("-stale=%d", s.plan.Stale), fmt.Sprintf("-seed=%d", seed), "-mode="+mode, "-dir="+dir)
	cmd.Env = append(os.Environ(), s.servers.env()...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("child: %v: %s", err, lastLines(stderr.Bytes()))
	}
	var r datasetReport
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		return nil, fmt.Errorf("child output: %v: %s", err, lastLines(stdout.Bytes()))
	}
	if mode != "load" && (r.Swept != s.plan.Stale || (r.Indexed && r.SweptIdx != s.plan.Stale)) {
		return &r, fmt.Errorf("sweep resolved %d (indexed: %d) stale claims, want %d", r.Swept, r.SweptIdx, s.plan.Stale)
	}
	return &r, nil
}

// copyDir copies the regular files under src into dst, keeping the tree.
func copyDir(src, dst string) error {
	return filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if fi.IsDir() {
			return os.MkdirAll(target, fi.Mode().Perm()|0o700)
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, fi.Mode().Perm())
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
}

// warmReads is how many retained keys a dataset child replays before it
// measures memory, so that a store measured after a reopen holds what a
// serving process holds, not a cold cache.
const warmReads = 10_000

// datasetChild is the child process's side. In "load" mode it loads the
// keys and closes the store. In "loaded" mode it measures an empty store
// in a directory of its own, then opens the loaded one, replays up to
// warmReads keys, measures memory, abandons stale claims, closes,
// measures the disk, reopens and sweeps. In "fill" mode it loads the keys
// into the open store first (stores that cannot be copied: servers, the
// map). It prints a datasetReport.
func datasetChild(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("dataset", flag.ContinueOnError)
	name := fs.String("contender", "", "contender name")
	n := fs.Int("n", 0, "retained keys")
	stale := fs.Int("stale", 100, "stale claims")
	seed := fs.Uint64("seed", 0, "the seed of the retained keys")
	mode := fs.String("mode", "fill", "load, loaded or fill")
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
	keys := keysOf(*seed, *n)
	r := &datasetReport{ServerMem: -1, ServerDisk: -1}
	if *mode == "load" {
		st, err := c.Open(ctx, *dir)
		if err != nil {
			return err
		}
		start := time.Now()
		if err := st.(Dataset).Fill(ctx, keys, benchResult); err != nil {
			st.Close()
			return fmt.Errorf("fill: %w", err)
		}
		r.FillSeconds = time.Since(start).Seconds()
		if err := st.Close(); err != nil {
			return err
		}
		r.Disk = dirBytes(*dir)
		return json.NewEncoder(os.Stdout).Encode(r)
	}

	settle()
	r.RSSBase = procStatus()["VmRSS"]
	heapBase := heapAlloc()
	emptyDir := *dir
	if *mode == "loaded" {
		emptyDir = *dir + "-empty"
		defer os.RemoveAll(emptyDir)
	}
	st, err := c.Open(ctx, emptyDir)
	if err != nil {
		return err
	}
	ds, ok := st.(Dataset)
	cl, ok2 := st.(Claimer)
	if !ok || !ok2 {
		st.Close()
		return errors.New("the store cannot be loaded")
	}
	settle()
	r.RSSEmpty = procStatus()["VmRSS"]
	r.HeapEmpty = heapAlloc() - heapBase

	if *mode == "loaded" {
		if err := st.Close(); err != nil {
			return err
		}
		start := time.Now()
		if st, err = c.Open(ctx, *dir); err != nil {
			return err
		}
		r.OpenMs = ms(time.Since(start))
		ds, cl = st.(Dataset), st.(Claimer)
	} else {
		start := time.Now()
		if err := ds.Fill(ctx, keys, benchResult); err != nil {
			st.Close()
			return fmt.Errorf("fill: %w", err)
		}
		r.FillSeconds = time.Since(start).Seconds()
	}
	for i := range min(*n, warmReads) {
		k := keys[(i*7919)%len(keys)]
		a, err := cl.Begin(ctx, k, benchFP)
		if err != nil || a.Outcome != Replayed {
			st.Close()
			return fmt.Errorf("warm read of %q: outcome %d, %v", k, a.Outcome, err)
		}
	}
	settle()
	ps := procStatus()
	r.RSS, r.HWM, r.RSSAnon, r.RSSFile = ps["VmRSS"], ps["VmHWM"], ps["RssAnon"], ps["RssFile"]
	r.Heap = heapAlloc()

	// Stale claims, keyed apart from the retained keys.
	if err := ds.Abandon(ctx, keysOf(*seed+1, *stale)); err != nil {
		st.Close()
		return fmt.Errorf("abandon: %w", err)
	}
	if fp, ok := st.(Footprinter); ok {
		r.ServerMem, r.ServerDisk, r.FootNote, err = fp.Footprint(ctx)
		if err != nil {
			st.Close()
			return fmt.Errorf("footprint: %w", err)
		}
	}
	if volatile(st) {
		r.Volatile = true
	} else {
		if err := st.Close(); err != nil {
			return fmt.Errorf("close: %w", err)
		}
		r.Disk = dirBytes(*dir)
		start := time.Now()
		if st, err = c.Open(ctx, *dir); err != nil {
			return fmt.Errorf("reopen: %w", err)
		}
		r.OpenMs = ms(time.Since(start))
		ds = st.(Dataset)
	}
	defer st.Close()
	if d, ok := st.(Dropper); ok {
		defer d.Drop(ctx)
	}
	// Stale means the lease ended: claims on PostgreSQL carry a 1 ms
	// lease. The sweep's syncs should not wait for the load's writeback.
	time.Sleep(5 * time.Millisecond)
	unix.Sync()

	start := time.Now()
	if r.Swept, err = ds.Sweep(ctx, benchResult); err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	r.SweepMs = ms(time.Since(start))

	if ix, ok := st.(Indexer); ok {
		if err := ds.Abandon(ctx, keysOf(*seed+2, *stale)); err != nil {
			return fmt.Errorf("abandon: %w", err)
		}
		if err := ix.Index(ctx); err != nil {
			return fmt.Errorf("index: %w", err)
		}
		time.Sleep(5 * time.Millisecond)
		unix.Sync()
		start = time.Now()
		if r.SweptIdx, err = ds.Sweep(ctx, benchResult); err != nil {
			return fmt.Errorf("indexed sweep: %w", err)
		}
		r.SweepIdxMs = ms(time.Since(start))
		r.Indexed = true
	}
	return json.NewEncoder(os.Stdout).Encode(r)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// settle collects garbage and returns freed memory to the system, so that
// resident memory counts what the store keeps rather than what loading
// left behind.
func settle() {
	runtime.GC()
	debug.FreeOSMemory()
}

func heapAlloc() int64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// procStatus returns the memory lines of /proc/self/status in bytes.
func procStatus() map[string]int64 {
	out := map[string]int64{}
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(b), "\n") {
		var name string
		var kb int64
		if _, err := fmt.Sscanf(line, "%s %d kB", &name, &kb); err == nil {
			out[strings.TrimSuffix(name, ":")] = kb << 10
		}
	}
	return out
}
