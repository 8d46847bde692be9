package idemadmin

import (
	"fmt"
	"time"

	"github.com/idemkit/idem"
)

// activityHours is how far back the page's chart of activity reaches, in
// hourly bars.
const activityHours = 24

// activity counts, per hour of the last activityHours before now, the
// claims made and the claims that ended (completed, released, recovered or
// settled), from the attempts the records keep: a record keeps its first
// and latest claims (backend.KeptAttempts), so a key claimed very often
// counts for fewer than it had.
type activity struct {
	now   time.Time
	start time.Time // now - activityHours, the left edge of the chart
	claim [activityHours]int
	ended [activityHours]int
}

func newActivity(now time.Time) *activity {
	return &activity{now: now, start: now.Add(-activityHours * time.Hour)}
}

// add counts rec's attempts.
func (a *activity) add(rec *idem.Record) {
	for _, at := range storedAttempts(rec) {
		if i, ok := a.hour(at.ClaimedAt); ok {
			a.claim[i]++
		}
		if i, ok := a.hour(at.EndedAt); ok {
			a.ended[i]++
		}
	}
}

// hour returns the bar t falls in, if any.
func (a *activity) hour(t time.Time) (int, bool) {
	if t.IsZero() || t.Before(a.start) || !t.Before(a.now) {
		return 0, false
	}
	return int(t.Sub(a.start) / time.Hour), true
}

// bar is one bar of the SVG chart, in the chart's coordinates.
type bar struct {
	X, Y, W, H int
	Class      string // "claims" or "ended", for the style sheet
	Title      string // the tooltip: what the bar counts
}

// chart is the SVG chart's geometry, computed here so that the template
// only places numbers.
type chart struct {
	Width, Height, Base int // the plot area and the y of its baseline
	Bars                []bar
	Max                 int // the count the full height stands for
	From, To            string
	Claims, Ended       int // totals over the chart
}

// chart lays out the bars: for each hour, claims on the left, ended on the
// right, scaled to the largest count.
func (a *activity) chart() chart {
	const barW, gap, plotH = 8, 4, 100
	c := chart{Width: activityHours * (2*barW + gap), Height: plotH + 2, Base: plotH,
		From: formatTime(a.start), To: formatTime(a.now)}
	for i := range activityHours {
		c.Max = max(c.Max, a.claim[i], a.ended[i])
		c.Claims += a.claim[i]
		c.Ended += a.ended[i]
	}
	scale := max(c.Max, 1)
	for i := range activityHours {
		from := a.start.Add(time.Duration(i) * time.Hour)
		x := i * (2*barW + gap)
		for j, n := range []int{a.claim[i], a.ended[i]} {
			h := n * plotH / scale
			if n > 0 {
				h = max(h, 1) // a count is never invisible
			}
			class, what := "claims", "claimed"
			if j == 1 {
				class, what = "ended", "ended"
			}
			c.Bars = append(c.Bars, bar{X: x + j*barW, Y: plotH - h, W: barW - 1, H: h, Class: class,
				Title: fmt.Sprintf("%s: %d %s in the hour from %s", class, n, what, formatTime(from))})
		}
	}
	return c
}
