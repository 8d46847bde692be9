package main

import (
	"fmt"
	"io"
	"sync"
)

// print writes the closing numbers.
func (r *tortureReport) print(w io.Writer) {
	fmt.Fprintf(w, "idem torture · %d workers · keys window %d · seed %d · %s\n", r.Workers, r.Keys, r.Seed, r.Elapsed)
	row := func(name string, v any) { fmt.Fprintf(w, "%-44s %12v\n", name, v) }
	row("cycles (child SIGKILLed, store checked)", r.Cycles)
	row("  killed before the store was open", r.KilledBeforeOpen)
	row("Do calls reported", r.DoCalls)
	row("  executed (ran the effect)", r.Executed)
	row("  replayed", r.Replayed)
	row("  effect failed and released (injected)", r.Failed)
	row("  in progress elsewhere (409)", r.Busy)
	row("  outcome unknown", r.Unknown)
	row("executions (effects booked in the ledger)", r.Executions)
	row("acknowledged keys", r.AckedKeys)
	row("orphaned claims found after kills", r.Orphans)
	row("resolved committed (ledger had it)", r.ResolvedCommitted)
	row("resolved not committed", r.ResolvedNotCommitted)
	row("  of them resolved by a child, under traffic", r.ResolvedInChildren)
	row("replays verified after kills (Do ran nothing)", r.ReplaysVerified)
	row("full checks (all records, all acknowledged)", r.FullChecks)
	row("violations", r.Violations)
	for _, m := range r.Messages {
		fmt.Fprintf(w, "  %s\n", m)
	}
	if r.Violations > 0 && r.Dir != "" {
		fmt.Fprintf(w, "The store and the ledger are kept in %s\n", r.Dir)
	}
}

// tailBuffer keeps the last 64 KiB written to it: a child's output.
type tailBuffer struct {
	mu sync.Mutex // guards b; the child's stdout and stderr copiers write at once
	b  []byte
}

const tailMax = 64 << 10

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > tailMax {
		t.b = append(t.b[:0], t.b[len(t.b)-tailMax:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
