package idemadmin

import (
	"container/heap"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
)

// Conditions a record can be judged in, as Row.Condition and Filter.State
// name them.
var conditions = []string{"attention", "stuck", "in_progress", "done", "released", "expired", "ran_twice"}

// Filter selects the records List returns. The zero Filter selects every
// record, as of the zero time; set Now.
type Filter struct {
	// Now is the time records are judged at (stuck, expired, ages).
	Now time.Time
	// State keeps the records in one state: "in_progress", "done" or
	// "released", or in one condition: "stuck", "attention" or "expired"
	// (see Row.Condition), or "ran_twice" for the records marked
	// idem.Record.MayHaveRunTwice. Empty keeps all.
	State string
	// Scope, if not nil, keeps the records of that scope only (the empty
	// scope is a scope).
	Scope *string
	// MinAge keeps the records that have been in their state at least
	// that long (see Row.Age).
	MinAge time.Duration
	// Limit bounds the rows returned, the first ones in the listing's
	// order; 0 means all. List holds at most Limit rows in memory.
	Limit int
	// Progress, if set, is called with the number of records scanned so
	// far, after each record.
	Progress func(scanned int)
	// Approximate, if set, reports whether a record's counts are a lower
	// bound (idem.Store.CountsApproximate): such rows are marked
	// (Row.CountsApproximate). Nil leaves every row unmarked; the handler
	// and idem ls set it.
	Approximate func(*idem.Record) bool
}

// Check returns an error if f names an unknown state or a negative limit
// or age.
func (f *Filter) Check() error {
	if f.State != "" && !validCondition(f.State) {
		return fmt.Errorf("idemadmin: unknown state %q (want one of %s)", f.State, strings.Join(conditions, ", "))
	}
	if f.Limit < 0 {
		return fmt.Errorf("idemadmin: negative limit %d", f.Limit)
	}
	if f.MinAge < 0 {
		return fmt.Errorf("idemadmin: negative age %s", f.MinAge)
	}
	return nil
}

func validCondition(s string) bool {
	for _, c := range conditions {
		if s == c {
			return true
		}
	}
	return false
}

// Row is one record in a listing: what an operator needs to pick it out,
// without its result's body.
type Row struct {
	Scope string `json:"scope"`
	Key   string `json:"key"`
	// State is the stored state: "in_progress", "done" or "released".
	State string `json:"state"`
	// Condition judges the record at the listing's now: "attention" (in
	// progress, recovery gave up), "stuck" (in progress, lease ended),
	// "in_progress" (a live claim), "done", "released", or "expired" (done
	// or released and past its expiry, not reclaimed yet).
	Condition string `json:"condition"`
	Token     uint64 `json:"token"`
	Claims    int    `json:"claims"`
	// Since is when the record entered its state: its claim for one in
	// progress, its completion or release otherwise. Age is the listing's
	// now minus Since; AgeSeconds the same in seconds, for JSON.
	Since      time.Time     `json:"since"`
	Age        time.Duration `json:"-"`
	AgeSeconds float64       `json:"age_seconds"`
	// Status is the saved result's status, for a done record.
	Status     int       `json:"status,omitempty"`
	Replays    int64     `json:"replays"`
	Rejections int64     `json:"rejections"`
	LeaseEnds  time.Time `json:"lease_ends,omitzero"`
	ExpiresAt  time.Time `json:"expires_at,omitzero"`
	// Checks counts the resolver's inconclusive answers about the claim.
	Checks int `json:"checks,omitempty"`
	// MayHaveRunTwice is the record's mark: a holder whose claim had been
	// recovered finished its effect after the key was claimed again.
	MayHaveRunTwice bool `json:"may_have_run_twice,omitempty"`
	// CountsApproximate says Replays and Rejections are a lower bound
	// (Filter.Approximate); the text and the page show "≥ N".
	CountsApproximate bool `json:"counts_approximate,omitempty"`
}

// rank orders conditions in a listing: those needing someone first, the
// effects that may have run twice before all.
func (r *Row) rank() int {
	switch {
	case r.MayHaveRunTwice:
		return 0
	case r.Condition == "attention":
		return 1
	case r.Condition == "stuck":
		return 2
	case r.Condition == "in_progress":
		return 3
	default:
		return 4
	}
}

// before reports whether a lists before b: by rank, then oldest first,
// then by scope and key so that the order is total.
func (r *Row) before(o *Row) bool {
	if a, b := r.rank(), o.rank(); a != b {
		return a < b
	}
	if !r.Since.Equal(o.Since) {
		return r.Since.Before(o.Since)
	}
	if r.Scope != o.Scope {
		return r.Scope < o.Scope
	}
	return r.Key < o.Key
}

// NewRow summarises rec as of now.
func NewRow(rec *idem.Record, now time.Time) Row {
	r := Row{Scope: rec.Scope, Key: rec.Key, State: rec.State.String(), Condition: condition(rec, now),
		Token: rec.Token, Claims: rec.Claims, Replays: rec.Replays, Rejections: rec.Conflicts + rec.Mismatches,
		Checks: rec.Checks, MayHaveRunTwice: rec.MayHaveRunTwice}
	if rec.State == idem.StateInProgress {
		r.Since, r.LeaseEnds = rec.ClaimedAt, rec.LeaseEnds
	} else {
		r.Since, r.ExpiresAt = rec.DoneAt, rec.ExpiresAt
	}
	if r.Since.IsZero() {
		r.Since = rec.FirstSeen
	}
	r.Age = max(now.Sub(r.Since), 0)
	r.AgeSeconds = r.Age.Seconds()
	if rec.State == idem.StateDone && rec.Result != nil {
		r.Status = rec.Result.Status
	}
	return r
}

func (f *Filter) keep(r *Row) bool {
	switch {
	case f.Scope != nil && r.Scope != *f.Scope:
		return false
	case r.Age < f.MinAge:
		return false
	case f.State == "" || f.State == r.Condition:
		return true
	case f.State == "ran_twice":
		return r.MayHaveRunTwice
	case f.State == "in_progress" || f.State == "done" || f.State == "released":
		return f.State == r.State
	}
	return false
}

// Listing is what List returns.
type Listing struct {
	Now time.Time `json:"now"`
	// Rows are the records kept, in the listing's order.
	Rows []Row `json:"rows"`
	// Matched counts the records the filter kept, Scanned all records
	// read; Matched > len(Rows) when Limit cut the listing.
	Matched int `json:"matched"`
	Scanned int `json:"scanned"`
}

// List scans every record of l and returns the ones f keeps: those marked
// as having possibly run twice first, then those needing attention, then
// stuck claims, then live claims, then the rest, each group oldest first.
func List(ctx context.Context, l backend.Lister, f Filter) (*Listing, error) {
	if err := f.Check(); err != nil {
		return nil, err
	}
	out := &Listing{Now: f.Now}
	// With a limit, a heap keeps the best Limit rows seen so far, its worst
	// on top to be dropped: memory stays bounded whatever the store holds.
	h := &rowHeap{}
	err := l.Scan(ctx, func(rec *idem.Record) bool {
		out.Scanned++
		if f.Progress != nil {
			f.Progress(out.Scanned)
		}
		r := NewRow(rec, f.Now)
		r.CountsApproximate = f.Approximate != nil && f.Approximate(rec)
		if !f.keep(&r) {
			return true
		}
		out.Matched++
		if f.Limit > 0 && h.Len() == f.Limit {
			if !r.before(&h.rows[0]) {
				return true
			}
			heap.Pop(h)
		}
		heap.Push(h, r)
		return true
	})
	if err != nil {
		return nil, err
	}
	out.Rows = make([]Row, h.Len())
	for i := len(out.Rows) - 1; i >= 0; i-- {
		out.Rows[i] = heap.Pop(h).(Row)
	}
	return out, nil
}

// rowHeap is a max-heap in listing order: its top is the row listed last.
type rowHeap struct{ rows []Row }

func (h *rowHeap) Len() int           { return len(h.rows) }
func (h *rowHeap) Less(i, j int) bool { return h.rows[j].before(&h.rows[i]) }
func (h *rowHeap) Swap(i, j int)      { h.rows[i], h.rows[j] = h.rows[j], h.rows[i] }
func (h *rowHeap) Push(x any)         { h.rows = append(h.rows, x.(Row)) }
func (h *rowHeap) Pop() any {
	r := h.rows[len(h.rows)-1]
	h.rows = h.rows[:len(h.rows)-1]
	return r
}

// Deadline says what ends the row's state, relative to now: its lease
// ("lease in 30s"), its orphaning by a restart ("orphaned"), or its expiry
// ("expiry in 23h"); "-" when nothing does.
func (r *Row) Deadline(now time.Time) string {
	switch {
	case r.State == "in_progress" && r.LeaseEnds.IsZero():
		return "orphaned"
	case r.State == "in_progress":
		return "lease " + relative(r.LeaseEnds, now)
	case !r.ExpiresAt.IsZero():
		return "expiry " + relative(r.ExpiresAt, now)
	}
	return "-"
}

// WriteText prints the listing as an aligned table, with a line saying how
// many records matched when the limit cut it.
func (l *Listing) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "CONDITION\tSCOPE\tKEY\tTOKEN\tCLAIMS\tAGE\tRESULT\tREPLAYS\tREJECTED\tLEASE/EXPIRY")
	for i := range l.Rows {
		r := &l.Rows[i]
		result := "-"
		if r.Status != 0 {
			result = strconv.Itoa(r.Status)
		}
		cond := r.Condition
		if r.Checks > 0 {
			cond += fmt.Sprintf(" (%d checks)", r.Checks)
		}
		if r.MayHaveRunTwice {
			cond = "RAN TWICE? " + cond
		}
		ge := ""
		if r.CountsApproximate {
			ge = "≥"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s%d\t%s%d\t%s\n", cond, quote(r.Scope), quote(r.Key),
			r.Token, r.Claims, formatAge(r.Age), result, ge, r.Replays, ge, r.Rejections, r.Deadline(l.Now))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(l.Rows) < l.Matched {
		_, err := fmt.Fprintf(w, "(%d of %d matching records shown)\n", len(l.Rows), l.Matched)
		return err
	}
	return nil
}
