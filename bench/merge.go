package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Remeasured records figures that replaced the run's own: a later,
// limited run (-workloads, -only) of some contenders in some workloads,
// merged into the full run's results with -render and -merge. The report
// names them, so that a reader knows which rows were not measured beside
// the rest.
type Remeasured struct {
	Started    time.Time `json:"started"`
	Finished   time.Time `json:"finished"`
	LoadStart  string    `json:"load_start"`
	LoadEnd    string    `json:"load_end,omitempty"`
	Note       string    `json:"note,omitempty"`
	Workloads  []string  `json:"workloads"`
	Contenders []string  `json:"contenders"`
}

// merge replaces r's measurements by later's wherever later measured the
// same contender in the same workload (a figure, not a status), and
// records what it replaced. A workload the run did not have (added to the
// suite since) is taken whole from later, with the plan's figure that
// sizes it. A figure the run lacks is taken too, when either run lists
// its contender (or the contender whose uncached figure it is): a
// contender added to the suite since the run, with its line in the list
// of contenders, or one an earlier merge brought in a few workloads only.
// It returns an error when later replaces nothing.
func (r *Results) merge(later *Results, note string) error {
	rm := Remeasured{Started: later.Started, Finished: later.Finished, LoadStart: later.Machine.LoadStart,
		LoadEnd: later.Machine.LoadEnd, Note: note}
	added := map[string]bool{}
	for _, w := range later.Workloads {
		if !slices.ContainsFunc(r.Workloads, func(o Workload) bool { return o.ID == w.ID }) {
			r.Workloads = append(r.Workloads, w)
			added[w.ID] = true
		}
	}
	if r.Plan.DiskReplayKeys == 0 {
		r.Plan.DiskReplayKeys = later.Plan.DiskReplayKeys
	}
	for _, m := range later.Measurements {
		if added[m.Workload] {
			r.Measurements = append(r.Measurements, m)
			if !slices.Contains(rm.Workloads, m.Workload) {
				rm.Workloads = append(rm.Workloads, m.Workload)
			}
			if m.ok() && !slices.Contains(rm.Contenders, m.Contender) {
				rm.Contenders = append(rm.Contenders, m.Contender)
			}
			continue
		}
		if !m.ok() {
			continue
		}
		i := slices.IndexFunc(r.Measurements, func(o *Measurement) bool {
			return o.Workload == m.Workload && o.Contender == m.Contender
		})
		switch {
		case i >= 0:
			r.Measurements[i] = m
		case r.known(later, m.Contender):
			r.addContender(later, m.Contender)
			r.Measurements = append(r.Measurements, m)
		default:
			continue
		}
		if !slices.Contains(rm.Workloads, m.Workload) {
			rm.Workloads = append(rm.Workloads, m.Workload)
		}
		if !slices.Contains(rm.Contenders, m.Contender) {
			rm.Contenders = append(rm.Contenders, m.Contender)
		}
	}
	if len(rm.Workloads) == 0 {
		return fmt.Errorf("bench: the later results measured nothing that the run has")
	}
	r.Remeasured = append(r.Remeasured, rm)
	r.rejudge()
	return nil
}

// known reports whether r or later lists the contender of a figure named
// name: the contender itself, or the one whose uncached figure it is.
func (r *Results) known(later *Results, name string) bool {
	listed := func(c ContenderInfo) bool {
		return c.Name == name || c.Name+uncachedSuffix == name
	}
	return slices.ContainsFunc(r.Contenders, listed) || slices.ContainsFunc(later.Contenders, listed)
}

// addContender lists among r's contenders the contender name of later,
// when r does not list it, and reports whether it did.
func (r *Results) addContender(later *Results, name string) bool {
	if slices.ContainsFunc(r.Contenders, func(c ContenderInfo) bool { return c.Name == name }) {
		return false
	}
	i := slices.IndexFunc(later.Contenders, func(c ContenderInfo) bool { return c.Name == name })
	if i < 0 {
		return false
	}
	r.Contenders = append(r.Contenders, later.Contenders[i])
	return true
}

// remeasuredMarkdown says which figures a later run replaced, or "".
func remeasuredMarkdown(r *Results) string {
	var b strings.Builder
	for _, rm := range r.Remeasured {
		fmt.Fprintf(&b, "> **Re-measured.** %s in %s were measured again on %s (%s, load average %s at the "+
			"start, %s at the end) and replace this run's figures; every ratio and target is computed "+
			"again with them.", strings.Join(rm.Contenders, ", "), strings.Join(rm.Workloads, ", "),
			rm.Started.UTC().Format("2006-01-02 15:04 MST"), rm.Finished.Sub(rm.Started).Round(time.Second),
			rm.LoadStart, rm.LoadEnd)
		if rm.Note != "" {
			fmt.Fprintf(&b, " %s", rm.Note)
		}
		b.WriteString("\n\n")
	}
	return b.String()
}
