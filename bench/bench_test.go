package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary serve as the dataset workload's child
// process, as the bench binary does.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && strings.HasPrefix(os.Args[1], "-child=") {
		if err := mainErr(context.Background(), os.Args[1:]); err != nil {
			os.Stderr.WriteString("bench child: " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestSuite_Smoke runs every workload against every contender for a
// handful of operations and checks that each either measured a figure or
// says why not (a server that is not installed, a workload that does not
// apply), that no store broke exactly-once, and that the report files are
// written. It judges no figure: the targets live in the report.
func TestSuite_Smoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts servers and child processes")
	}
	res, err := runSuite(context.Background(), smokePlan(), t.TempDir(), nil, nil, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Measurements) == 0 {
		t.Fatal("no measurements")
	}
	for _, m := range res.Measurements {
		switch {
		case strings.HasPrefix(m.Status, "error"):
			t.Errorf("%s / %s: %s", m.Workload, m.Contender, m.Status)
		case m.Status == "" && len(m.Reps) == 0:
			t.Errorf("%s / %s: neither a figure nor a reason", m.Workload, m.Contender)
		}
	}
	for _, id := range []string{"cycle-1", "cycle-32", "replay-32", "replay-disk-1", "replay-disk-32"} {
		if m := res.find(id, "idem"); !m.ok() {
			t.Errorf("idem has no %s figure: %+v", id, m)
		}
	}
	for _, id := range []string{"replay-disk-1", "replay-disk-32"} {
		if m := res.find(id, "badger-get"); !m.ok() {
			t.Errorf("the engine's bare read has no %s figure: %+v", id, m)
		}
	}
	out := t.TempDir()
	if err := writeResults(out, res); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"report.md", "results.json", "chart.svg"} {
		b, err := os.ReadFile(filepath.Join(out, f))
		if err != nil || len(b) == 0 {
			t.Errorf("%s: %v, %d bytes", f, err, len(b))
		}
	}
}

// TestSustained_RenderFromJSON checks that the sustained workload's
// samples survive results.json, so that -render draws the same table and
// chart as the run did.
func TestSustained_RenderFromJSON(t *testing.T) {
	r := &Results{Mode: "smoke", Plan: smokePlan(), Contenders: []ContenderInfo{{Name: "idem", Kind: "idem"}}}
	s := &Suite{res: r, logf: t.Logf}
	s.addWorkload(Workload{ID: "sustained-anon-peak", Unit: "MiB", Reference: "idem"})
	samples := []sustainedSample{{Cycles: 100, Anon: 10 << 20, File: 2 << 20, Heap: 5 << 20},
		{Cycles: 200, Anon: 20 << 20, File: 3 << 20, Heap: 6 << 20}}
	s.add("sustained-anon-peak", "idem", 21, map[string]any{"samples": samples}, nil)
	dir := t.TempDir()
	if err := writeResults(dir, r); err != nil {
		t.Fatal(err)
	}
	back, err := readResults(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	runs := sustainedRuns(back)
	if len(runs) != 1 || len(runs[0].samples) != 2 || runs[0].samples[1] != samples[1] {
		t.Fatalf("samples after the round trip: %+v", runs)
	}
	if !strings.Contains(sustainedMarkdown(back), "| 200 | 20 / 3 / 6 |") {
		t.Errorf("the report's memory-over-time table lacks the second sample:\n%s", sustainedMarkdown(back))
	}
	if svg := sustainedSVG(back); !strings.Contains(svg, "<polyline") {
		t.Errorf("the chart draws no line:\n%s", svg)
	}
}

// TestSustainedResult checks the sustained workload's results: 1 KiB of
// valid JSON, different for different keys.
func TestSustainedResult(t *testing.T) {
	a, b := sustainedResult(1, 1), sustainedResult(1, 2)
	if len(a) != sustainedResultSize || !json.Valid(a) {
		t.Fatalf("result of %d bytes, valid JSON %v: %s", len(a), json.Valid(a), a)
	}
	if bytes.Equal(a, b) {
		t.Error("two keys got the same result")
	}
}

// TestMerge checks -merge: a later run's figure replaces the run's own for
// the same contender and workload, the ratios and targets are computed
// again, the report names what was re-measured, and a later run that
// measured nothing of the run's is refused.
func TestMerge(t *testing.T) {
	at := func(c string, v float64) *Measurement {
		return &Measurement{Workload: "sustained-anon-peak", Contender: c, Reps: []float64{v}, Median: v}
	}
	w := []Workload{{ID: "sustained-anon-peak", Unit: "MiB", Reference: "idem"}}
	run := &Results{Workloads: w, Measurements: []*Measurement{at("idem", 100), at("idem-budget32", 80), at("sqlite-full", 20)}}
	run.computeRatios()
	run.judgeTargets()
	later := &Results{Started: time.Date(2026, 12, 2, 5, 0, 0, 0, time.UTC), Workloads: w,
		Measurements: []*Measurement{at("idem-budget32", 50), {Workload: "sustained-anon-peak", Contender: "bbolt-update", Status: "not run"}}}
	later.Finished = later.Started.Add(20 * time.Minute)
	if err := run.merge(later, "After the throttle patch."); err != nil {
		t.Fatal(err)
	}
	if m := run.find("sustained-anon-peak", "idem-budget32"); m.Median != 50 || m.Ratio != 0.5 {
		t.Errorf("idem-budget32 after the merge: median %v, ratio %v; want 50 and 0.5", m.Median, m.Ratio)
	}
	if m := run.find("sustained-anon-peak", "sqlite-full"); m.Median != 20 {
		t.Errorf("sqlite-full changed: %+v", m)
	}
	if len(run.Remeasured) != 1 || !slices.Equal(run.Remeasured[0].Contenders, []string{"idem-budget32"}) {
		t.Errorf("remeasured: %+v", run.Remeasured)
	}
	verdict := ""
	for _, tg := range run.Targets {
		if strings.Contains(tg.Got, "50") {
			verdict = tg.Verdict
		}
	}
	if verdict != "PASS" {
		t.Errorf("the 32 MiB budget's target after the merge: %q; targets %+v", verdict, run.Targets)
	}
	if md := reportMarkdown(run); !strings.Contains(md, "**Re-measured.** idem-budget32 in sustained-anon-peak") ||
		!strings.Contains(md, "After the throttle patch.") {
		t.Errorf("the report does not name the re-measured figures:\n%s", md[:min(len(md), 2000)])
	}
	if err := run.merge(&Results{Measurements: []*Measurement{at("nobody", 1)}}, ""); err == nil {
		t.Error("a later run that replaces nothing was merged")
	}

	// A workload added to the suite since the run comes whole from the
	// later one, with the plan's figure that sizes it.
	disk := &Measurement{Workload: "replay-disk-1", Contender: "idem", Reps: []float64{7}, Median: 7}
	later = &Results{Plan: Plan{DiskReplayKeys: 1_000_000}, Workloads: []Workload{{ID: "replay-disk-1", Unit: "replays/s", Higher: true}},
		Measurements: []*Measurement{disk, {Workload: "replay-disk-1", Contender: "pgx", Status: "n/a"}}}
	if err := run.merge(later, ""); err != nil {
		t.Fatal(err)
	}
	if m := run.find("replay-disk-1", "idem"); m == nil || m.Median != 7 || run.Plan.DiskReplayKeys != 1_000_000 {
		t.Errorf("the added workload: %+v, plan %+v", m, run.Plan)
	}
	if m := run.find("replay-disk-1", "pgx"); m == nil || m.Status != "n/a" {
		t.Errorf("the added workload's n/a: %+v", m)
	}

	// A contender added to the suite since the run (the engine's floor)
	// comes with its figures and its line in the list of contenders; a
	// figure of a contender the later run does not list is not taken.
	floor := &Measurement{Workload: "replay-disk-1", Contender: "badger-get", Reps: []float64{14}, Median: 14}
	floor32 := &Measurement{Workload: "replay-disk-32", Contender: "badger-get", Reps: []float64{15}, Median: 15}
	later = &Results{Contenders: []ContenderInfo{{Name: "badger-get", Kind: "limit"}},
		Measurements: []*Measurement{floor, floor32, {Workload: "replay-disk-1", Contender: "ghost", Reps: []float64{1}, Median: 1}}}
	if err := run.merge(later, ""); err != nil {
		t.Fatal(err)
	}
	// Its figures in every workload, not only the first one met.
	if m := run.find("replay-disk-1", "badger-get"); m == nil || m.Median != 14 {
		t.Errorf("the added contender's figure: %+v", m)
	}
	if m := run.find("replay-disk-32", "badger-get"); m == nil || m.Median != 15 {
		t.Errorf("the added contender's figure in a second workload: %+v", m)
	}
	if kindOf(run, "badger-get") != "limit" || run.find("replay-disk-1", "ghost") != nil {
		t.Errorf("contenders after the merge: %+v", run.Contenders)
	}

	// A contender the run lists but measured in fewer workloads (an
	// earlier merge brought it in from a run of one workload) gets the
	// figures it lacks, its uncached figure among them.
	onlyOne := &Measurement{Workload: "replay-disk-32", Contender: "badger-get", Reps: []float64{16}, Median: 16}
	uncached := &Measurement{Workload: "replay-disk-1", Contender: "badger-get" + uncachedSuffix, Reps: []float64{3}, Median: 3}
	run.Measurements = slices.DeleteFunc(run.Measurements, func(m *Measurement) bool {
		return m.Workload == "replay-disk-32" && m.Contender == "badger-get"
	})
	later = &Results{Measurements: []*Measurement{onlyOne, uncached}}
	if err := run.merge(later, ""); err != nil {
		t.Fatal(err)
	}
	if m := run.find("replay-disk-32", "badger-get"); m == nil || m.Median != 16 {
		t.Errorf("a listed contender's missing figure: %+v", m)
	}
	if m := run.find("replay-disk-1", "badger-get"+uncachedSuffix); m == nil || m.Median != 3 {
		t.Errorf("a listed contender's uncached figure: %+v", m)
	}
}

// TestUniform checks the replay-from-disk workload's key draws: always in
// range, spread evenly over the keys, and different for different seeds.
func TestUniform(t *testing.T) {
	const n, draws, buckets = 1000, 200_000, 10
	var count [buckets]int
	for i := range draws {
		k := uniform(3, i, n)
		if k < 0 || k >= n {
			t.Fatalf("draw %d: %d out of [0, %d)", i, k, n)
		}
		count[k*buckets/n]++
	}
	for b, c := range count {
		if want := draws / buckets; c < want*95/100 || c > want*105/100 {
			t.Errorf("bucket %d: %d draws, want about %d", b, c, want)
		}
	}
	same := 0
	for i := range 1000 {
		if uniform(0, i, n) == uniform(1, i, n) {
			same++
		}
	}
	if same > 10 {
		t.Errorf("seeds 0 and 1 drew the same key %d times in 1,000", same)
	}
}

// TestProxyFirstCall checks which durable cycle the proxies' first-call
// target adds: idem's cycle-1 when it was measured in the same run as the
// proxy rows, the workload's own store cycle when the proxy rows were
// merged from a later run.
func TestProxyFirstCall(t *testing.T) {
	at := func(w, c string, v float64) *Measurement {
		return &Measurement{Workload: w, Contender: c, Reps: []float64{v}, Median: v}
	}
	r := &Results{Measurements: []*Measurement{at("cycle-1", "idem", 2000), // 500,000 ns a cycle
		at("proxy-mcp", "proxy first call", 1_500_000), at("proxy-mcp", "plain forwarding", 600_000),
		at("proxy-mcp", storeCycle, 900_000)}}
	target := func() Target {
		r.Targets = nil
		r.proxyFirstCall("proxy-first", "proxy-mcp", "idem mcp-proxy")
		return r.Targets[0]
	}
	// 600,000 + 500,000 + 300,000 = 1,400,000 < 1,500,000.
	if tg := target(); tg.Verdict != "MISS" || !strings.Contains(tg.Want, "cycle-1") {
		t.Errorf("same run: %+v", tg)
	}
	// 600,000 + 900,000 + 300,000 = 1,800,000 ≥ 1,500,000.
	r.Remeasured = []Remeasured{{Workloads: []string{"proxy-mcp"}}}
	if tg := target(); tg.Verdict != "PASS" || !strings.Contains(tg.Want, storeCycle) {
		t.Errorf("proxy rows merged from a later run: %+v", tg)
	}
}
