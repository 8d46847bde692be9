// Command bench runs idem's side-by-side benchmark suite: idem in each
// durability mode (and on PostgreSQL when a server is available) against
// the stores a user would reach for instead (SQLite, bbolt, a map with a
// mutex, raw pgx on PostgreSQL, go-redis on Redis) and against the
// physical limit (a raw 4 KiB write + fdatasync loop), on the same
// workloads, in one run.
//
// Usage:
//
//	cd bench && go run . -quick   # a quick look: 100 ms repetitions, 2,000 and 20,000 retained keys, 200,000 replayed from disk
//	cd bench && go run .          # full mode, about an hour: longer repetitions, 1,000,000 retained keys and sustained cycles
//
// It writes results/report.md (the tables, the project's targets judged
// on this run, the machine), results/results.json (every
// repetition), results/chart.svg and results/sustained.svg.
//
// Servers: $IDEM_POSTGRES_URL names a PostgreSQL server; without it the
// suite starts a throwaway cluster when PostgreSQL's binaries are
// installed. $IDEM_REDIS_URL names a Redis server; without it the suite
// starts redis-server on a free port when the binary is installed.
// Contenders without a server are reported as not run.
//
// The module is separate from the library's so that the peers'
// dependencies never enter idem's go.mod; it builds against the library
// in the parent directory.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := mainErr(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		stop()
		os.Exit(1)
	}
}

func mainErr(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	quick := fs.Bool("quick", false, "quick mode: short repetitions, 2,000 and 20,000 retained keys, 200,000 keys replayed from disk, 10,000 sustained cycles (a few minutes)")
	out := fs.String("out", "results", "directory for report.md, results.json and chart.svg")
	only := fs.String("only", "", "comma-separated contenders to run (default all)")
	groups := fs.String("workloads", "", "comma-separated workload groups to run: cycle,txeffect,replay,replay-disk,hot,dataset,sustained,fingerprint,http,proxy (default all)")
	tmp := fs.String("tmp", "", "directory for the stores (default the system's temporary directory)")
	child := fs.String("child", "", "internal: run as a child process of the named workload")
	render := fs.String("render", "", "render the report again from this results.json into -out, measuring nothing")
	mergeFrom := fs.String("merge", "", "with -render: replace the run's figures by this later results.json's where it measured the same contender in the same workload")
	mergeNote := fs.String("merge-note", "", "with -merge: a sentence for the report on the later run (what changed)")
	sustained := fs.Int("sustained-cycles", 0, "sustained cycles per store, sampled every twentieth (default the mode's: 1,000,000 full, 10,000 quick)")
	if len(args) > 0 && strings.HasPrefix(args[0], "-child=") {
		// A child's own flags follow; only -child is the parent's.
		if err := fs.Parse(args[:1]); err != nil {
			return err
		}
		return runChild(ctx, *child, args[1:])
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *render != "" {
		res, err := readResults(*render)
		if err != nil {
			return err
		}
		if *mergeFrom != "" {
			later, err := readResults(*mergeFrom)
			if err != nil {
				return err
			}
			if err := res.merge(later, *mergeNote); err != nil {
				return err
			}
		}
		return writeResults(*out, res)
	}
	plan := fullPlan()
	if *quick {
		plan = quickPlan()
	}
	if *sustained > 0 {
		plan.SustainedCycles, plan.SustainedEvery = *sustained, max(1, *sustained/20)
	}
	logf := func(format string, a ...any) { fmt.Fprintf(os.Stderr, format+"\n", a...) }
	res, err := runSuite(ctx, plan, *tmp, split(*only), split(*groups), logf)
	if err != nil {
		return err
	}
	if err := writeResults(*out, res); err != nil {
		return err
	}
	logf("wrote %s in %s", filepath.Join(*out, "report.md"), res.Finished.Sub(res.Started).Round(time.Second))
	for _, t := range res.Targets {
		logf("  %-4s %s: %s (%s)", t.Verdict, t.Name, t.Got, t.Margin)
	}
	return nil
}

// runSuite starts the servers, runs the plan against the contenders
// (those named in only, or all), and returns the results with their
// ratios and targets.
func runSuite(ctx context.Context, plan Plan, tmp string, only, groups []string, logf func(string, ...any)) (*Results, error) {
	if tmp == "" {
		tmp = os.TempDir()
	}
	base, err := os.MkdirTemp(tmp, "idem-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(base)
	res := &Results{Mode: plan.Mode, Started: time.Now(), Plan: plan, Machine: describeMachine(tmp)}
	logf("idem bench, %s mode, on %s (%d cores), stores in %s (%s)", plan.Mode, res.Machine.CPU, res.Machine.Cores,
		tmp, res.Machine.FS)

	srv := startServers(ctx, logf)
	defer srv.Stop()
	res.Servers = map[string]string{"postgres": srv.PGNote, "redis": srv.RedisNote}

	var cs []Contender
	for _, c := range allContenders(srv) {
		if len(only) == 0 || slices.Contains(only, c.Name) {
			cs = append(cs, c)
		}
	}
	s := &Suite{plan: plan, servers: srv, contenders: cs, workloads: groups, tmp: base, logf: logf, res: res}
	if err := s.Run(ctx); err != nil {
		return nil, err
	}
	res.Finished = time.Now()
	res.Machine.LoadEnd = loadAvg()
	res.computeRatios()
	res.judgeTargets()
	return res, nil
}

// runChild runs the child-process side of a workload.
func runChild(ctx context.Context, which string, args []string) error {
	switch which {
	case "dataset":
		return datasetChild(ctx, args)
	case "sustained":
		return sustainedChild(ctx, args)
	}
	return fmt.Errorf("unknown child %q", which)
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
