package main

import "time"

// Plan sizes a run. Every timed measurement runs for Duration or MaxOps
// operations, whichever ends first, and is repeated Reps times.
type Plan struct {
	Mode     string        `json:"mode"` // "quick" or "full"
	Reps     int           `json:"reps"`
	Duration time.Duration `json:"duration_ns"`
	// Warm is the uncounted run before each timed one.
	Warm   time.Duration `json:"warm_ns"`
	MaxOps int           `json:"max_ops"`
	// ReplayKeys is how many done keys the replay workload reads.
	ReplayKeys int `json:"replay_keys"`
	// DiskReplayKeys is how many done keys the replay-from-disk workload
	// loads and reads after a reopen: more than idem's replay cache holds.
	DiskReplayKeys int `json:"disk_replay_keys"`
	// HotKeys keys are hammered by HotGoroutines goroutines; after
	// HotEpoch requests the workload moves on to fresh keys, so that every
	// run sees claims, conflicts and replays.
	HotKeys       int `json:"hot_keys"`
	HotGoroutines int `json:"hot_goroutines"`
	HotEpoch      int `json:"hot_epoch"`
	// SmallSize and LargeSize are the retained-key counts of the memory,
	// disk and recovery workloads; Stale is how many stale claims the
	// recovery sweep finds among them.
	SmallSize int `json:"small_size"`
	LargeSize int `json:"large_size"`
	Stale     int `json:"stale"`
	// ServerLargeMax caps the retained keys loaded into idem on
	// PostgreSQL: it can only be loaded through the public API, a claim
	// and a completion per key, which takes minutes for a million.
	ServerLargeMax int `json:"server_large_max"`
	// MicroDuration bounds each repetition of the CPU-bound workloads
	// (fingerprint, HTTP replay).
	MicroDuration time.Duration `json:"micro_duration_ns"`
	// SustainedCycles is how many durable cycles the sustained-write
	// workload runs per contender, sampling memory every SustainedEvery.
	SustainedCycles int `json:"sustained_cycles"`
	SustainedEvery  int `json:"sustained_every"`
}

// quickPlan is a quick look: every workload, 3 repetitions each, but
// short ones (100 ms), 2,000 and 20,000 retained keys rather than 10,000
// and 1,000,000, no retained keys for idem on PostgreSQL (loaded through
// the public API in every repetition: a third of the dataset workloads'
// time), 10,000 sustained cycles per store instead of 1,000,000, and
// 200,000 keys replayed from disk instead of 1,000,000. On the shared
// 2-core machine the rest took 1m31s-1m53s at load 6-7; the sustained
// workload adds about a minute (most of it the durable peers), the
// replay from disk one to two and a half (64-149 s at load averages of 2
// to 12, most of it loading idem twice through its public API). What
// remains is mostly fixed costs per repetition: a fresh store, a sync
// before each measurement, PostgreSQL's connections. The full plan is the
// reference.
func quickPlan() Plan {
	return Plan{
		Mode: "quick", Reps: 3, Duration: 100 * time.Millisecond, Warm: 20 * time.Millisecond, MaxOps: 1_000_000,
		ReplayKeys: 1_000, DiskReplayKeys: 200_000, HotKeys: 4, HotGoroutines: 32, HotEpoch: 256,
		SmallSize: 2_000, LargeSize: 20_000, Stale: 100, ServerLargeMax: 0,
		MicroDuration:   100 * time.Millisecond,
		SustainedCycles: 10_000, SustainedEvery: 1_000,
	}
}

// fullPlan runs longer repetitions and retains 1,000,000 keys.
func fullPlan() Plan {
	return Plan{
		Mode: "full", Reps: 3, Duration: time.Second, Warm: 100 * time.Millisecond, MaxOps: 10_000_000,
		ReplayKeys: 20_000, DiskReplayKeys: 1_000_000, HotKeys: 4, HotGoroutines: 32, HotEpoch: 256,
		SmallSize: 10_000, LargeSize: 1_000_000, Stale: 100, ServerLargeMax: 100_000,
		MicroDuration:   time.Second,
		SustainedCycles: 1_000_000, SustainedEvery: 50_000,
	}
}

// smokePlan runs each contender for a handful of operations (the test).
func smokePlan() Plan {
	return Plan{
		Mode: "smoke", Reps: 1, Duration: 50 * time.Millisecond, Warm: 10 * time.Millisecond, MaxOps: 20,
		ReplayKeys: 20, DiskReplayKeys: 400, HotKeys: 2, HotGoroutines: 4, HotEpoch: 8,
		SmallSize: 200, LargeSize: 400, Stale: 5, ServerLargeMax: 400,
		MicroDuration:   10 * time.Millisecond,
		SustainedCycles: 400, SustainedEvery: 100,
	}
}
