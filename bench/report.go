package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// readResults reads a results.json that an earlier run wrote, so that
// the report can be rendered again (-render) without measuring again.
func readResults(path string) (*Results, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Results
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	r.rejudge()
	return &r, nil
}

// writeResults writes report.md, results.json and chart.svg into dir.
func writeResults(dir string, r *Results) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "chart.svg"), []byte(chartSVG(r)), 0o644); err != nil {
		return err
	}
	if svg := sustainedSVG(r); svg != "" {
		if err := os.WriteFile(filepath.Join(dir, "sustained.svg"), []byte(svg), 0o644); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dir, "report.md"), []byte(reportMarkdown(r)), 0o644)
}

// summaryWorkloads are the columns of the report's summary table and the
// panels of the chart.
func summaryWorkloads(r *Results) []string {
	return []string{"cycle-1", "cycle-32", "replay-1", "replay-32", "replay-disk-1", "replay-disk-32",
		fmt.Sprintf("hot-%dx%d", r.Plan.HotGoroutines, r.Plan.HotKeys)}
}

// reportMarkdown renders the report.
func reportMarkdown(r *Results) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	cmd := "go run ."
	if r.Mode == "quick" {
		cmd = "go run . -quick"
	}
	p("# idem: benchmarks side by side (%s mode)\n\n", r.Mode)
	p("Measured %s in %s with `cd bench && %s`; raw figures, every repetition, in [results.json](results.json).\n\n",
		r.Started.UTC().Format("2006-01-02 15:04 MST"), r.Finished.Sub(r.Started).Round(time.Second), cmd)
	p("Every figure is the **median of %d repetitions**; every ratio divides by idem's median (or the named "+
		"reference) **measured in the same run**. For rates, a ratio above 1 means faster than idem; for "+
		"memory, bytes and times, above 1 means more than idem.", r.Plan.Reps)
	if r.Mode == "quick" {
		p(" Quick mode: %s per timed repetition, **%s and %s retained keys instead of 10k and 1M** for "+
			"memory, disk and the recovery sweeps, and **%s instead of 1M** for the replays from disk.",
			r.Plan.Duration, sizeLabel(r.Plan.SmallSize), sizeLabel(r.Plan.LargeSize), sizeLabel(r.Plan.DiskReplayKeys))
	}
	p("\n\n> **Noise.** This machine has %d cores and other engineers run builds on it at the same time "+
		"(load average %s at the start, %s at the end): the figures are noisy, by tens of percent for the "+
		"synced workloads. Ratios within one run are steadier than absolute figures across runs.\n\n",
		r.Machine.Cores, r.Machine.LoadStart, r.Machine.LoadEnd)
	p("%s", remeasuredMarkdown(r))
	p("![Rates of the main workloads](chart.svg)\n\n")

	p("## Targets\n\n")
	p("Judged on this run's medians; never asserted in tests.\n\n")
	p("| target | want | got | verdict | margin |\n|---|---|---|---|---|\n")
	for _, t := range r.Targets {
		p("| %s | %s | %s | **%s** | %s |\n", t.Name, t.Want, t.Got, t.Verdict, t.Margin)
	}

	why := missNotes()
	var missed []string
	for _, t := range r.Targets {
		if t.Verdict == "MISS" && why[t.ID] != "" && !slices.Contains(missed, t.ID) {
			missed = append(missed, t.ID)
		}
	}
	if len(missed) > 0 {
		p("\n### Why the misses, and what would close them\n\n")
		for _, id := range missed {
			p("- **%s**: %s\n", id, why[id])
		}
	}

	p("\n## Summary\n\nMedians; in brackets the ratio to idem (durable) in this run.\n\n")
	cols := summaryWorkloads(r)
	p("| contender | durable |")
	for _, id := range cols {
		p(" %s |", id)
	}
	p("\n|---|---|")
	for range cols {
		p("--:|")
	}
	p("\n")
	for _, c := range r.Contenders {
		p("| %s | %s |", c.Name, yesNo(c.Durable))
		for _, id := range cols {
			m := r.find(id, c.Name)
			switch {
			case m.ok():
				p(" %s (%s) |", fmtNum(m.Median), fmtRatio(m.Ratio))
			default:
				p(" %s |", shortStatus(m))
			}
		}
		p("\n")
	}
	p("\nUnits: cycles/s, replays/s, requests/s (higher is better).\n")

	b.WriteString(sustainedMarkdown(r))

	p("\n## Workloads\n")
	for _, w := range r.Workloads {
		better := "lower is better"
		if w.Higher {
			better = "higher is better"
		}
		p("\n### %s\n\n%s. Unit: %s, %s. Ratio: figure ÷ %s's figure in this run.\n\n", w.Title, w.About, w.Unit, better, w.Reference)
		p("| contender | median | repetitions | × %s | notes |\n|---|--:|---|--:|---|\n", w.Reference)
		for _, m := range r.Measurements {
			if m.Workload != w.ID {
				continue
			}
			if !m.ok() {
				p("| %s | – | – | – | %s |\n", m.Contender, m.Status)
				continue
			}
			reps := make([]string, len(m.Reps))
			for i, v := range m.Reps {
				reps[i] = fmtNum(v)
			}
			p("| %s | %s | %s | %s | %s |\n", m.Contender, fmtNum(m.Median), strings.Join(reps, ", "),
				fmtRatio(m.Ratio), notes(m))
		}
	}

	p("\n## Contenders\n\nEach in its most sensible durable configuration, and where one exists, its faster one. ")
	p("Peers implement what an idempotency table needs (state, fingerprint, lease, expiry, result) and nothing ")
	p("more: no fencing tokens, no heartbeats, no audit trail, no retention sweep, which idem does on every cycle.\n\n")
	p("| contender | durable on power loss | configuration |\n|---|---|---|\n")
	for _, c := range r.Contenders {
		cfg := c.Config
		if c.Skip != "" {
			cfg += " — **" + c.Skip + "**"
		}
		p("| %s | %s | %s |\n", c.Name, yesNo(c.Durable), cfg)
	}
	p("\nServers: PostgreSQL: %s. Redis: %s.\n", r.Servers["postgres"], r.Servers["redis"])

	m := r.Machine
	p("\n## Machine\n\n| | |\n|---|---|\n")
	if m.Library != "" {
		p("| idem checkout | %s |\n", m.Library)
	}
	p("| CPU | %s |\n| cores | %d |\n| memory | %.1f GiB |\n| kernel | Linux %s |\n| Go | %s (%s) |\n",
		m.CPU, m.Cores, m.MemoryGiB, m.Kernel, m.Go, m.OS)
	p("| stores in | %s: %s on %s (%s) |\n| disk | %s |\n| date | %s |\n| load average (1 min) | %s at start, %s at end |\n",
		m.TempDir, m.FS, m.Device, m.MountOptions, m.Disk, m.Date.Format(time.RFC3339), m.LoadStart, m.LoadEnd)
	return b.String()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// shortStatus is a table cell for a missing figure.
func shortStatus(m *Measurement) string {
	switch {
	case m == nil:
		return "–"
	case strings.HasPrefix(m.Status, "not run"):
		return "not run"
	case strings.HasPrefix(m.Status, "n/a"):
		return "n/a"
	case strings.HasPrefix(m.Status, "error"):
		return "error"
	}
	return "–"
}

// notes renders a measurement's details worth a reader's eye.
func notes(m *Measurement) string {
	per := perRep(m)
	if len(per) == 0 {
		return ""
	}
	last := per[len(per)-1]
	var parts []string
	if _, ok := last["violations"]; ok {
		execs, keys, viol := 0, 0, 0
		for _, d := range per {
			execs += toInt(d["executions"])
			keys += toInt(d["keys"])
			viol += toInt(d["violations"])
		}
		verdict := "exactly once: OK"
		if viol > 0 {
			verdict = fmt.Sprintf("exactly once: BROKEN on %d keys", viol)
		}
		parts = append(parts, fmt.Sprintf("%s (%d executions for %d keys)", verdict, execs, keys))
	}
	if v, ok := last["vmhwm_mib"].(float64); ok {
		parts = append(parts, fmt.Sprintf("peak %.0f MiB", v))
	}
	if v, ok := last["bytes"]; ok {
		parts = append(parts, fmt.Sprintf("%.1f MiB in all", mib(int64(toInt(v)))))
	}
	if v, ok := last["open_ms"].(float64); ok && v > 0 {
		parts = append(parts, fmt.Sprintf("reopen %.0f ms", v))
	}
	if v, ok := last["idle_wait_ms"].(float64); ok && v > 0 {
		parts = append(parts, fmt.Sprintf("idle %.0f ms after it", v))
	}
	if v, ok := last["note"].(string); ok {
		parts = append(parts, v)
	}
	if c := costNote(per); c != "" {
		parts = append(parts, c)
	}
	return strings.Join(parts, "; ")
}

// medianDetail returns the median over the repetitions of a figure
// runCosted recorded (perOp), and whether any repetition had it.
func medianDetail(m *Measurement, key string) (float64, bool) {
	var xs []float64
	for _, d := range perRep(m) {
		if v, ok := d[key].(float64); ok {
			xs = append(xs, v)
		}
	}
	return median(xs), len(xs) > 0
}

// costNote renders the medians of the per-operation costs runCosted
// recorded, if any: this process's CPU and allocations (a server's are not
// in them), and the disk's write requests and bytes.
func costNote(per []map[string]any) string {
	m := &Measurement{Detail: map[string]any{"per_rep": per}}
	med := func(k string) (float64, bool) { return medianDetail(m, k) }
	cpu, ok := med("cpu_us")
	if !ok {
		return ""
	}
	alloc, _ := med("alloc_bytes")
	s := fmt.Sprintf("per op: %s µs CPU and %s bytes allocated in this process", fmtNum(cpu), fmtNum(alloc))
	if w, ok := med("disk_writes"); ok {
		b, _ := med("disk_bytes")
		s += fmt.Sprintf(", %s write requests and %s KB to the disk", fmtNum(w), fmtNum(b/1e3))
	}
	return s
}

// perRep returns a measurement's per-repetition details, as the suite
// recorded them or as results.json gives them back.
func perRep(m *Measurement) []map[string]any {
	switch v := m.Detail["per_rep"].(type) {
	case []map[string]any:
		return v
	case []any:
		var out []map[string]any
		for _, d := range v {
			if d, ok := d.(map[string]any); ok {
				out = append(out, d)
			}
		}
		return out
	}
	return nil
}

func toInt(v any) int {
	switch x := v.(type) {
	case int:
		return x
	case int64:
		return int(x)
	case float64:
		return int(x)
	}
	return 0
}

// fmtNum renders a figure with about three significant digits and
// thousands separators.
func fmtNum(v float64) string {
	a := math.Abs(v)
	switch {
	case v == 0:
		return "0"
	case a >= 1000:
		return groupThousands(fmt.Sprintf("%.0f", v))
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3g", v)
}

func groupThousands(s string) string {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}

func fmtRatio(r float64) string {
	switch {
	case r == 0:
		return "–"
	case r >= 10:
		return fmt.Sprintf("%.0f×", r)
	case r >= 0.1:
		return fmt.Sprintf("%.2f×", r)
	}
	return fmt.Sprintf("%.2g×", r)
}
