package main

import (
	"time"
)

// Results is everything one run measured; results.json holds it whole.
type Results struct {
	Mode       string            `json:"mode"`
	Started    time.Time         `json:"started"`
	Finished   time.Time         `json:"finished"`
	Machine    Machine           `json:"machine"`
	Plan       Plan              `json:"plan"`
	Servers    map[string]string `json:"servers"`
	Contenders []ContenderInfo   `json:"contenders"`
	Workloads  []Workload        `json:"workloads"`
	// Measurements holds every figure with every repetition.
	Measurements []*Measurement `json:"measurements"`
	Targets      []Target       `json:"targets"`
	// Remeasured lists the figures a later run replaced (-merge).
	Remeasured []Remeasured `json:"remeasured,omitempty"`
}

// ContenderInfo is what the report says of a contender.
type ContenderInfo struct {
	Name    string `json:"name"`
	Kind    string `json:"kind"`
	Durable bool   `json:"durable"`
	Config  string `json:"config"`
	Skip    string `json:"skip,omitempty"`
}

// Workload describes one measured figure.
type Workload struct {
	ID    string `json:"id"`
	Title string `json:"title"`
	// About says what one operation is and how it is counted.
	About string `json:"about"`
	Unit  string `json:"unit"`
	// Higher is true when a larger figure is better (rates).
	Higher bool `json:"higher_is_better"`
	// Reference is the contender the ratios divide by: idem, or idem's
	// side of a two-way comparison.
	Reference string `json:"reference"`
}

// Measurement is one contender's figure in one workload: every
// repetition, their median, and the ratio of the median to the
// reference's median in the same run.
type Measurement struct {
	Workload  string    `json:"workload"`
	Contender string    `json:"contender"`
	Reps      []float64 `json:"reps,omitempty"`
	Median    float64   `json:"median"`
	// Ratio is Median divided by the reference's Median; 0 when either
	// is missing.
	Ratio float64 `json:"ratio_to_reference,omitempty"`
	// Status is empty for a measured figure, else why there is none:
	// "n/a: ...", "not run: ...", "error: ...".
	Status string `json:"status,omitempty"`
	// Detail holds figures beside the main one (counts, checks, notes).
	Detail map[string]any `json:"detail,omitempty"`
}

// ok reports whether m holds a measured figure.
func (m *Measurement) ok() bool { return m != nil && m.Status == "" && len(m.Reps) > 0 }

// Target is one of the targets, judged on this run's figures.
type Target struct {
	// ID names the target for the notes on misses.
	ID   string `json:"id"`
	Name string `json:"name"`
	// Want states the target; Got the figure, both in words.
	Want string `json:"want"`
	Got  string `json:"got"`
	// Verdict is PASS, MISS or n/a; Margin says by how much.
	Verdict string `json:"verdict"`
	Margin  string `json:"margin"`
}

// find returns the measurement of a contender in a workload, or nil.
func (r *Results) find(workload, contender string) *Measurement {
	for _, m := range r.Measurements {
		if m.Workload == workload && m.Contender == contender {
			return m
		}
	}
	return nil
}

// workload returns the workload with id, or nil.
func (r *Results) workload(id string) *Workload {
	for i := range r.Workloads {
		if r.Workloads[i].ID == id {
			return &r.Workloads[i]
		}
	}
	return nil
}

// rejudge computes the ratios and judges the targets again from the
// measurements, as after reading or merging them.
func (r *Results) rejudge() {
	r.Targets = nil
	r.computeRatios()
	r.judgeTargets()
}

// computeRatios fills every measurement's ratio to its workload's
// reference.
func (r *Results) computeRatios() {
	for _, m := range r.Measurements {
		w := r.workload(m.Workload)
		if w == nil || !m.ok() {
			continue
		}
		if ref := r.find(w.ID, w.Reference); ref.ok() && ref.Median != 0 {
			m.Ratio = m.Median / ref.Median
		}
	}
}
