package idemadmin

import (
	"expvar"
	"sync"

	"github.com/idemkit/idem"
)

// Metrics receives counters and gauges by name. Implementations must be
// safe for concurrent use and quick: CountEvents calls Add on the
// request's path. Expvar adapts an expvar.Map; an adapter for another
// system (Prometheus's client library, say) maps each name to a counter
// or gauge of its own, in the caller's module.
type Metrics interface {
	// Add adds delta to the counter name.
	Add(name string, delta int64)
	// Set sets the gauge name to v.
	Set(name string, v float64)
}

// CountEvents returns an idem.Observer that counts every event by kind in
// m: "events_claimed", "events_replayed", "events_in_progress",
// "events_mismatch", "events_completed", "events_released", "events_held",
// "events_extended", "events_fenced", "events_stale", "events_recovered",
// "events_unknown", "events_attention", "events_expired" and
// "events_error" (the names of idem.EventKind), and recoveries by verdict
// in "recovered_committed" and "recovered_not_committed". Pass it in the
// store's Options.Observer (Tee combines observers).
func CountEvents(m Metrics) idem.Observer {
	return idem.ObserverFunc(func(e idem.Event) {
		m.Add("events_"+e.Kind.String(), 1)
		if e.Kind == idem.EventRecovered && e.Verdict != "" {
			m.Add("recovered_"+e.Verdict, 1)
		}
	})
}

// SetGauges sets gauges from s: "records", "records_in_progress",
// "records_done", "records_released", "records_stuck",
// "records_attention", "records_expired", "oldest_open_claim_seconds"
// (its age; 0 when none is open), "expiry_horizon_seconds" (from s.Now;
// 0 when past), and, when s.Disk is known, "disk_lsm_bytes",
// "disk_vlog_bytes" and "disk_total_bytes", with "disk_free_bytes" and
// "disk_reserve_bytes" when the free space can be measured (new claims
// are refused while free is below reserve).
func SetGauges(m Metrics, s *Stats) {
	m.Set("records", float64(s.Records))
	m.Set("records_in_progress", float64(s.InProgress))
	m.Set("records_done", float64(s.Done))
	m.Set("records_released", float64(s.Released))
	m.Set("records_stuck", float64(s.Stuck))
	m.Set("records_attention", float64(s.Attention))
	m.Set("records_expired", float64(s.Expired))
	oldest := 0.0
	if s.OldestOpen != nil {
		oldest = s.OldestOpen.Age.Seconds()
	}
	m.Set("oldest_open_claim_seconds", oldest)
	horizon := 0.0
	if s.ExpiryHorizon.After(s.Now) {
		horizon = s.ExpiryHorizon.Sub(s.Now).Seconds()
	}
	m.Set("expiry_horizon_seconds", horizon)
	if s.Disk != nil {
		m.Set("disk_lsm_bytes", float64(s.Disk.LSM))
		m.Set("disk_vlog_bytes", float64(s.Disk.VLog))
		m.Set("disk_total_bytes", float64(s.Disk.Total))
		if s.Disk.Free != nil {
			m.Set("disk_free_bytes", float64(*s.Disk.Free))
			m.Set("disk_reserve_bytes", float64(s.Disk.Reserve))
		}
	}
}

// Expvar returns Metrics kept in m: counters as *expvar.Int, gauges as
// *expvar.Float. Publish m under a name of your choosing (expvar.Publish
// panics when a name is taken twice, so this package never publishes):
//
//	m := new(expvar.Map)
//	expvar.Publish("idem", m)
//	metrics := idemadmin.Expvar(m)
func Expvar(m *expvar.Map) Metrics { return &expvarMetrics{m: m} }

type expvarMetrics struct {
	m *expvar.Map
	// mu serialises creating gauges, so that two first Sets of one name
	// cannot each install their own Float.
	mu sync.Mutex
}

func (e *expvarMetrics) Add(name string, delta int64) { e.m.Add(name, delta) }

func (e *expvarMetrics) Set(name string, v float64) {
	if f, ok := e.m.Get(name).(*expvar.Float); ok {
		f.Set(v)
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	f, ok := e.m.Get(name).(*expvar.Float)
	if !ok {
		f = new(expvar.Float)
		e.m.Set(name, f)
	}
	f.Set(v)
}
