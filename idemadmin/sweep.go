package idemadmin

import (
	"context"
	"fmt"
	"io"
	"sort"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/idemkit/idem"
)

// MaxDecisions bounds the decisions one Sweep keeps; SweepResult.Omitted
// counts the rest. A sweep reclaims up to tens of thousands of expired
// records, one decision each.
const MaxDecisions = 10000

// Decisions is an idem.Observer that records what recovery and
// reclamation decide about each key while Sweep runs: pass it in the
// store's Options.Observer at Open (idem.Observers combines it with other
// observers). Outside a Sweep it ignores every event. The zero value is
// ready to use; a Decisions serves one store.
type Decisions struct {
	// run serialises Sweeps, so that each one's decisions are its own.
	run sync.Mutex

	// mu guards the fields below.
	mu        sync.Mutex
	capturing bool
	list      []SweepDecision
	omitted   int
}

// SweepDecision is what one sweep decided about one key.
type SweepDecision struct {
	Time  time.Time `json:"time"`
	Scope string    `json:"scope"`
	Key   string    `json:"key"`
	Token uint64    `json:"token,omitempty"`
	// Event is the observer's event: "recovered", "unknown", "attention",
	// "stale" or "expired".
	Event string `json:"event"`
	// Verdict is the resolver's answer, for recovery events.
	Verdict string `json:"verdict,omitempty"`
	// Reason explains a stale claim left as it was (such as "no resolver
	// configured").
	Reason string `json:"reason,omitempty"`
	// Detail says what the decision means, in words.
	Detail string `json:"detail"`
}

// Observe implements idem.Observer.
func (d *Decisions) Observe(e idem.Event) {
	switch e.Kind {
	case idem.EventRecovered, idem.EventUnknown, idem.EventAttention, idem.EventStale, idem.EventExpired:
	default:
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.capturing {
		return
	}
	if len(d.list) >= MaxDecisions {
		d.omitted++
		return
	}
	d.list = append(d.list, SweepDecision{Time: e.Time, Scope: e.Scope, Key: e.Key, Token: e.Token,
		Event: e.Kind.String(), Verdict: e.Verdict, Reason: e.Reason, Detail: explain(e)})
}

// explain says what an event of a sweep means for its key.
func explain(e idem.Event) string {
	switch e.Kind {
	case idem.EventRecovered:
		if e.Verdict == idem.VerdictCommitted.String() {
			return "committed downstream: its result is saved and replayed"
		}
		return "not committed downstream: released, the next request runs it"
	case idem.EventUnknown:
		return "the resolver could not tell: kept in progress, asked again later"
	case idem.EventAttention:
		return "the resolver could not tell, again: recovery gave up, an operator must decide"
	case idem.EventStale:
		if e.Reason != "" {
			return "stale claim left in progress (" + e.Reason + "): repeats are refused as outcome unknown until it is resolved"
		}
		return "stale claim: asking the resolver"
	case idem.EventExpired:
		return "expired: reclaimed"
	}
	return e.Kind.String()
}

// SweepResult is what Sweep did.
type SweepResult struct {
	Now time.Time `json:"now"`
	// Resolver says whether the store has a Resolver. Without one a sweep
	// only reports stale claims, and reclaims expired records.
	Resolver bool `json:"resolver"`
	// Counts count what the sweep did.
	Counts SweepCounts `json:"counts"`
	// Decisions lists each decision (empty, [] in JSON, when there were
	// none) when Sweep was given a Decisions observer, and is nil (null)
	// without one; Omitted counts those beyond MaxDecisions.
	Decisions []SweepDecision `json:"decisions"`
	Omitted   int             `json:"omitted,omitempty"`
}

// SweepCounts are idem.SweepReport's counts.
type SweepCounts struct {
	// Stale counts the stale claims examined; Committed, NotCommitted and
	// Unknown the resolver's verdicts; Attention the claims marked as
	// needing attention; Unresolved the stale claims left as they were (no
	// resolver, or not due for a check).
	Stale        int `json:"stale"`
	Committed    int `json:"committed"`
	NotCommitted int `json:"not_committed"`
	Unknown      int `json:"unknown"`
	Attention    int `json:"attention"`
	Unresolved   int `json:"unresolved"`
	// Expired counts the expired records reclaimed.
	Expired int `json:"expired"`
}

func countsOf(r idem.SweepReport) SweepCounts {
	return SweepCounts{Stale: r.Stale, Committed: r.Committed, NotCommitted: r.NotCommitted,
		Unknown: r.Unknown, Attention: r.Attention, Unresolved: r.Unresolved, Expired: r.Expired}
}

// Sweep runs s.Sweep once and reports each decision that d, the Decisions
// observer in s's Options, saw meanwhile. With a nil d it reports counts
// only. A stale claim's "stale" decision is followed by the resolver's
// verdict when the store has a Resolver; a claim marked as needing
// attention is not asked again, so it does not appear.
func Sweep(ctx context.Context, s *idem.Store, d *Decisions) (*SweepResult, error) {
	out := &SweepResult{Now: s.Options().Clock.Now(), Resolver: s.Options().Resolver != nil}
	if d == nil {
		rep, err := s.Sweep(ctx)
		out.Counts = countsOf(rep)
		return out, err
	}
	d.run.Lock()
	defer d.run.Unlock()
	d.mu.Lock()
	d.capturing, d.list, d.omitted = true, nil, 0
	d.mu.Unlock()

	rep, err := s.Sweep(ctx)

	d.mu.Lock()
	out.Counts, out.Decisions, out.Omitted = countsOf(rep), d.list, d.omitted
	d.capturing, d.list, d.omitted = false, nil, 0
	d.mu.Unlock()
	// A resolved claim gives two events, stale then its verdict: the
	// verdict is the decision.
	out.Decisions = dropAsked(out.Decisions)
	if out.Decisions == nil {
		out.Decisions = []SweepDecision{}
	}
	// Batches come oldest lease first, and orphaned claims all share a
	// zero lease: order by time, then scope and key, for stable reports.
	sort.SliceStable(out.Decisions, func(i, j int) bool {
		a, b := &out.Decisions[i], &out.Decisions[j]
		if !a.Time.Equal(b.Time) {
			return a.Time.Before(b.Time)
		}
		if a.Scope != b.Scope {
			return a.Scope < b.Scope
		}
		return a.Key < b.Key
	})
	return out, err
}

// dropAsked removes the "stale" events that only announced a question to
// the resolver whose answer follows.
func dropAsked(ds []SweepDecision) []SweepDecision {
	type ref struct {
		scope, key string
		token      uint64
	}
	answered := map[ref]bool{}
	for _, d := range ds {
		if d.Event != "stale" && d.Event != "expired" {
			answered[ref{d.Scope, d.Key, d.Token}] = true
		}
	}
	out := ds[:0]
	for _, d := range ds {
		if d.Event == "stale" && d.Reason == "" && answered[ref{d.Scope, d.Key, d.Token}] {
			continue
		}
		out = append(out, d)
	}
	return out
}

// WriteText prints the decisions as an aligned table, then the counts.
func (r *SweepResult) WriteText(w io.Writer) error {
	if !r.Resolver {
		fmt.Fprintln(w, "no resolver: stale claims are reported and left in progress; expired records are reclaimed")
		fmt.Fprintln(w)
	}
	if len(r.Decisions) > 0 {
		tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "DECISION\tSCOPE\tKEY\tTOKEN\tDETAIL")
		for _, d := range r.Decisions {
			event := d.Event
			if d.Verdict != "" && d.Event == "recovered" {
				event += " (" + d.Verdict + ")"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", event, quote(d.Scope), quote(d.Key), d.Token, d.Detail)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if r.Omitted > 0 {
			fmt.Fprintf(w, "(%d more decisions not listed)\n", r.Omitted)
		}
		fmt.Fprintln(w)
	}
	rep := r.Counts
	_, err := fmt.Fprintf(w, "stale claims %d: committed %d, not committed %d, unknown %d (attention %d), left as they were %d\nexpired records reclaimed %d\n",
		rep.Stale, rep.Committed, rep.NotCommitted, rep.Unknown, rep.Attention, rep.Unresolved, rep.Expired)
	return err
}
