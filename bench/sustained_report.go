package main

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// Geometry of the sustained-write chart, in SVG user units.
const (
	lineChartLeft   = 70
	lineChartWidth  = 760
	lineChartHeight = 180
	lineChartGap    = 60
)

// lineColor is the i-th contender's colour in the sustained-write chart,
// in report order; idem comes first, in the blue of the main chart.
func lineColor(i int) string {
	colors := [...]string{"#2b6cb0", "#38a169", "#d69e2e", "#e53e3e", "#805ad5", "#718096"}
	return colors[i%len(colors)]
}

// sustainedSeries is one contender's samples.
type sustainedSeries struct {
	name    string
	samples []sustainedSample
}

// sustainedRuns returns the samples of every contender that ran the
// sustained workload, in report order.
func sustainedRuns(r *Results) []sustainedSeries {
	var out []sustainedSeries
	for _, c := range r.Contenders {
		if ps := sustainedSamples(r.find("sustained-anon-peak", c.Name)); len(ps) > 0 {
			out = append(out, sustainedSeries{c.Name, ps})
		}
	}
	return out
}

// sustainedSVG draws the memory of each contender over the sustained run:
// one panel each for anonymous memory, file-backed memory and the live Go
// heap, in MiB against cycles. It returns "" when nothing ran.
func sustainedSVG(r *Results) string {
	runs := sustainedRuns(r)
	if len(runs) == 0 {
		return ""
	}
	panels := []struct {
		title string
		get   func(sustainedSample) int64
	}{
		{"Anonymous memory (RssAnon, MiB): what the store costs the host", func(p sustainedSample) int64 { return p.Anon }},
		{"File-backed memory (RssFile, MiB): mapped files, reclaimable", func(p sustainedSample) int64 { return p.File }},
		{"Live Go heap after a GC (MiB)", func(p sustainedSample) int64 { return p.Heap }},
	}
	maxCycles := 0
	for _, s := range runs {
		maxCycles = max(maxCycles, s.samples[len(s.samples)-1].Cycles)
	}
	height := 70 + len(panels)*(lineChartHeight+lineChartGap)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		chartWidth, height, chartWidth, height)
	b.WriteString(`<rect width="100%" height="100%" fill="white"/>` + "\n")
	fmt.Fprintf(&b, `<text x="10" y="22" font-size="16" font-weight="bold">Memory under sustained durable writes (%s cycles, %d goroutines, 1 KiB results; %s mode)</text>`+"\n",
		groupThousands(fmt.Sprint(maxCycles)), sustainedGoroutines, html.EscapeString(r.Mode))
	for i, s := range runs {
		x := 10 + i*140
		fmt.Fprintf(&b, `<rect x="%d" y="34" width="14" height="4" fill="%s"/><text x="%d" y="40">%s</text>`+"\n",
			x, lineColor(i), x+18, html.EscapeString(s.name))
	}
	y := 70
	for _, p := range panels {
		b.WriteString(linePanel(p.title, runs, p.get, maxCycles, y))
		y += lineChartHeight + lineChartGap
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// linePanel draws one panel of the sustained chart with its top at y.
func linePanel(title string, runs []sustainedSeries, get func(sustainedSample) int64, maxCycles, y int) string {
	top := 1.0
	for _, s := range runs {
		for _, p := range s.samples {
			top = math.Max(top, mib(get(p)))
		}
	}
	top = niceCeil(top)
	px := func(c int) float64 { return lineChartLeft + lineChartWidth*float64(c)/float64(max(1, maxCycles)) }
	py := func(v float64) float64 { return float64(y+lineChartHeight) - lineChartHeight*v/top }
	var b strings.Builder
	fmt.Fprintf(&b, `<text x="10" y="%d" font-weight="bold">%s</text>`+"\n", y-6, html.EscapeString(title))
	for k := 0; k <= 4; k++ {
		v := top * float64(k) / 4
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n",
			lineChartLeft, py(v), lineChartLeft+lineChartWidth, py(v))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" fill="#777" font-size="10" text-anchor="end">%s</text>`+"\n",
			lineChartLeft-4, py(v)+3, fmtNum(v))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#777" font-size="10" text-anchor="end">%s cycles</text>`+"\n",
		lineChartLeft+lineChartWidth, y+lineChartHeight+14, groupThousands(fmt.Sprint(maxCycles)))
	for i, s := range runs {
		pts := make([]string, 0, len(s.samples))
		for _, p := range s.samples {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(p.Cycles), py(mib(get(p)))))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n",
			lineColor(i), strings.Join(pts, " "))
	}
	return b.String()
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

// sustainedMarkdown is the report's section on the sustained workload:
// each contender's peak and steady figures, and its memory over time.
func sustainedMarkdown(r *Results) string {
	runs := sustainedRuns(r)
	if len(runs) == 0 {
		return ""
	}
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("\n## Memory under sustained writes\n\n")
	if w := r.workload("sustained-rate"); w != nil {
		p("%s. Anonymous memory (RssAnon: heap, stacks, allocator buffers) is what a store costs its host; "+
			"file-backed memory (RssFile: mapped table files) is reclaimable page cache and is shown beside it.\n\n", w.About)
	}
	p("![Memory over the sustained run](sustained.svg)\n\n")
	p("| contender | cycles/s | peak RssAnon | steady RssAnon | steady RssFile | peak VmRSS | largest live heap | RssAnon after Close |\n")
	p("|---|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, s := range runs {
		cell := func(id string) string {
			if m := r.find(id, s.name); m.ok() {
				return fmtNum(m.Median)
			}
			return "–"
		}
		after := "–"
		if per := perRep(r.find("sustained-anon-peak", s.name)); len(per) > 0 {
			if v, ok := per[len(per)-1]["after_close_anon_mib"].(float64); ok {
				after = fmtNum(v)
			}
		}
		p("| %s | %s | %s | %s | %s | %s | %s | %s |\n", s.name, cell("sustained-rate"), cell("sustained-anon-peak"),
			cell("sustained-anon-steady"), cell("sustained-file-steady"), cell("sustained-rss-peak"),
			cell("sustained-heap-peak"), after)
	}
	p("\nMemory in MiB. Over time (RssAnon / RssFile / live heap, MiB, at each sample):\n\n| cycles |")
	for _, s := range runs {
		p(" %s |", s.name)
	}
	p("\n|--:|")
	for range runs {
		p("--:|")
	}
	p("\n")
	for i := range longestRun(runs) {
		cycles := 0
		var cells []string
		for _, s := range runs {
			if i >= len(s.samples) {
				cells = append(cells, "")
				continue
			}
			sm := s.samples[i]
			cycles = sm.Cycles
			cells = append(cells, fmt.Sprintf("%.0f / %.0f / %.0f", mib(sm.Anon), mib(sm.File), mib(sm.Heap)))
		}
		p("| %s | %s |\n", groupThousands(fmt.Sprint(cycles)), strings.Join(cells, " | "))
	}
	return b.String()
}

// longestRun returns the most samples any run holds.
func longestRun(runs []sustainedSeries) int {
	n := 0
	for _, s := range runs {
		n = max(n, len(s.samples))
	}
	return n
}
