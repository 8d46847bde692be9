package main

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// Chart geometry, in SVG user units.
const (
	chartWidth = 900
	labelWidth = 150 // contender names
	barMax     = 600 // the longest bar
	rowHeight  = 18
	panelTop   = 40 // title and axis of a panel
	panelGap   = 16
)

// chartSVG draws one horizontal bar chart per main workload: each
// contender's median rate on a logarithmic axis (the rates span five
// orders of magnitude), idem in blue, peers in grey, the raw sync loop in
// orange, with the ratio to idem written after each bar. It is plain SVG
// written by hand: no plotting dependency.
func chartSVG(r *Results) string {
	var panels []string
	y := 50
	for _, id := range summaryWorkloads(r) {
		w := r.workload(id)
		if w == nil {
			continue
		}
		var rows []*Measurement
		for _, c := range r.Contenders {
			if m := r.find(id, c.Name); m.ok() {
				rows = append(rows, m)
			}
		}
		if len(rows) == 0 {
			continue
		}
		panel, h := chartPanel(r, w, rows, y)
		panels = append(panels, panel)
		y += h + panelGap
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		chartWidth, y, chartWidth, y)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="10" y="22" font-size="16" font-weight="bold">idem against its peers (%s mode, medians of %d; log scale; ratio to idem after each bar)</text>`+"\n",
		html.EscapeString(r.Mode), r.Plan.Reps)
	fmt.Fprintf(&b, `<text x="10" y="40" fill="#555">%s, %d cores, %s; blue: idem, grey: peers, orange: raw 4 KiB synced writes (fdatasync, O_DIRECT)</text>`+"\n",
		html.EscapeString(r.Machine.CPU), r.Machine.Cores, r.Machine.Date.Format("2006-01-02"))
	for _, p := range panels {
		b.WriteString(p)
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// chartPanel draws one workload's bars from y down and returns the SVG
// and the height used.
func chartPanel(r *Results, w *Workload, rows []*Measurement, y int) (string, int) {
	lo, hi := math.Inf(1), 0.0
	for _, m := range rows {
		lo, hi = math.Min(lo, m.Median), math.Max(hi, m.Median)
	}
	// The axis spans whole decades around the figures.
	dlo, dhi := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	if dhi <= dlo {
		dhi = dlo + 1
	}
	x := func(v float64) float64 { return labelWidth + barMax*(math.Log10(v)-dlo)/(dhi-dlo) }
	var b strings.Builder
	fmt.Fprintf(&b, `<text x="10" y="%d" font-weight="bold">%s (%s)</text>`+"\n", y+14, html.EscapeString(w.Title), w.Unit)
	axisY := y + panelTop - 8
	for d := dlo; d <= dhi; d++ {
		xv := x(math.Pow(10, d))
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>`+"\n", xv, axisY, xv, axisY+len(rows)*rowHeight+4)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" fill="#777" font-size="10" text-anchor="middle">%s</text>`+"\n", xv, axisY-2, decade(d))
	}
	for i, m := range rows {
		ry := y + panelTop + i*rowHeight
		color := "#a0aec0"
		switch kindOf(r, m.Contender) {
		case "idem":
			color = "#2b6cb0"
		case "limit":
			color = "#dd6b20"
		}
		// The bar starts at the axis' first decade so that the smallest
		// figure still shows.
		width := math.Max(1, x(m.Median)-labelWidth)
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", labelWidth-6, ry+12, html.EscapeString(m.Contender))
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", labelWidth, ry+2, width, rowHeight-4, color)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" fill="#333">%s (%s)</text>`+"\n", labelWidth+width+4, ry+12,
			fmtNum(m.Median), fmtRatio(m.Ratio))
	}
	return b.String(), panelTop + len(rows)*rowHeight
}

// kindOf returns a contender's kind.
func kindOf(r *Results, name string) string {
	for _, c := range r.Contenders {
		if c.Name == name {
			return c.Kind
		}
	}
	return ""
}

// decade labels the axis line at 10^d.
func decade(d float64) string {
	if d < 0 {
		return fmt.Sprintf("%g", math.Pow(10, d))
	}
	return groupThousands(fmt.Sprintf("%.0f", math.Pow(10, d)))
}
