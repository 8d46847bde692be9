package idemadmin_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/badgerstore"
	"github.com/idemkit/idem/idemadmin"
	"github.com/idemkit/idem/idemtest"
)

func events(s *idemadmin.Story) []string {
	var out []string
	for _, e := range s.Timeline {
		out = append(out, e.Event)
	}
	return out
}

func TestTell_Conditions(t *testing.T) {
	now := t0.Add(2 * time.Hour)
	for _, tc := range []struct {
		name      string
		rec       func() *idem.Record
		condition string
		summary   string
		events    []string
	}{
		{"recovered", recovered, "done", "done: repeats get status 201",
			[]string{"first_seen", "claimed", "orphaned", "recovered", "replayed", "expires"}},
		{"stuck", stuck, "stuck", "stuck: its lease ended 1h19m ago",
			[]string{"first_seen", "claimed", "lease_ended"}},
		{"live", func() *idem.Record {
			r := stuck()
			r.LeaseEnds = now.Add(time.Minute)
			return r
		}, "in_progress", "in progress: a live claim (lease ends in 1m)", []string{"first_seen", "claimed", "lease_ends"}},
		{"expired", func() *idem.Record {
			r := recovered()
			r.ExpiresAt = t0.Add(time.Hour)
			return r
		}, "expired", "expired 1h ago", []string{"first_seen", "claimed", "orphaned", "recovered", "replayed", "expired"}},
		{"attention", func() *idem.Record {
			r := stuck()
			r.LeaseEnds, r.Checks, r.Attention = time.Time{}, 10, true
			r.Attempts[0].Reason = "orphaned by a restart"
			return r
		}, "attention", "needs attention: recovery gave up after 10 inconclusive checks",
			[]string{"first_seen", "claimed", "orphaned", "unknown", "attention"}},
		{"released", func() *idem.Record {
			r := stuck()
			r.State, r.DoneAt, r.ExpiresAt = idem.StateReleased, t0.Add(41*time.Minute), t0.Add(25*time.Hour)
			r.Attempts[0].EndedAt, r.Attempts[0].Outcome, r.Attempts[0].Reason = r.DoneAt, "released", "panic"
			return r
		}, "released", "released: the next request", []string{"first_seen", "claimed", "released", "expires"}},
		{"no attempts kept", func() *idem.Record {
			r := recovered()
			r.Attempts = nil
			return r
		}, "done", "done", []string{"first_seen", "claimed", "recovered", "replayed", "expires"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := idemadmin.Tell(tc.rec(), now)
			if s.Condition != tc.condition || !strings.HasPrefix(s.Summary, tc.summary) {
				t.Errorf("condition %q, summary %q; want %q and %q…", s.Condition, s.Summary, tc.condition, tc.summary)
			}
			if got := events(s); !slices.Equal(got, tc.events) {
				t.Errorf("events %q, want %q", got, tc.events)
			}
		})
	}
}

// TestTell_ManyClaims: a record keeps the first and the latest claims; the
// story numbers them and says how many it lost.
func TestTell_ManyClaims(t *testing.T) {
	clock := idemtest.NewClock(t0)
	// ErrorText keeps each attempt's text, to tell the first from the rest.
	mem, err := badgerstore.Open("", badgerstore.Options{InMemory: true}) // the embedded store, in memory
	if err != nil {
		t.Fatal(err)
	}
	store := idem.New(mem, &idem.Options{Clock: clock, SweepInterval: -1,
		ErrorText: error.Error})
	defer store.Close()
	ctx := context.Background()
	req := idem.Request{Key: "flaky", Fingerprint: "fp"}
	const claims = 20
	for i := range claims {
		clock.Advance(time.Second)
		_, _, err := store.Do(ctx, req, func(context.Context) (idem.Result, error) {
			if i < claims-1 {
				return idem.Result{}, fmt.Errorf("attempt %d failed", i+1)
			}
			return idem.Result{Status: 200}, nil
		})
		if i < claims-1 && err == nil {
			t.Fatal("a failed attempt was saved")
		}
	}
	rec, err := store.Get(ctx, "", "flaky")
	if err != nil {
		t.Fatal(err)
	}
	s := idemadmin.Tell(rec, clock.Now())
	var b strings.Builder
	if err := s.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	lost := claims - backend.KeptAttempts
	for _, want := range []string{
		"claim 1 of 20: token 1", "released (error: attempt 1 failed)",
		fmt.Sprintf("%d claims not kept", lost),
		fmt.Sprintf("claim %d of 20: token %d", lost+2, lost+2),
		"claim 20 of 20: token 20", "completed: status 200 saved",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("story lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, fmt.Sprintf("claim %d of 20", lost+1)) {
		t.Errorf("a claim not kept is told:\n%s", out)
	}
	// The timeline is in time order.
	var last time.Time
	for _, e := range s.Timeline {
		if !e.Time.IsZero() && e.Time.Before(last) {
			t.Fatalf("entry %+v before %s:\n%s", e, last, out)
		}
		if !e.Time.IsZero() {
			last = e.Time
		}
	}
}

// TestList_LimitKeepsTheFirst: with a limit, List returns exactly the
// first rows of the unlimited listing, whatever the scan order.
func TestList_LimitKeepsTheFirst(t *testing.T) {
	now := t0.Add(3 * time.Hour)
	rng := rand.New(rand.NewPCG(1, 2))
	var rs records
	for i := range 300 {
		r := stuck()
		r.Key = fmt.Sprintf("k-%03d", i)
		r.Scope = fmt.Sprintf("s-%d", rng.IntN(3))
		r.ClaimedAt = t0.Add(time.Duration(rng.IntN(120)) * time.Minute)
		switch rng.IntN(4) {
		case 0:
			r.LeaseEnds = now.Add(time.Minute) // live
		case 1:
			r.Attention = true
		case 2:
			r.State, r.DoneAt, r.ExpiresAt = idem.StateDone, r.ClaimedAt, now.Add(time.Duration(rng.IntN(5)-2)*time.Hour)
			r.Result = &idem.Result{Status: 200}
		}
		rs = append(rs, r)
	}
	rng.Shuffle(len(rs), func(i, j int) { rs[i], rs[j] = rs[j], rs[i] })
	all, err := idemadmin.List(context.Background(), rs, idemadmin.Filter{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if len(all.Rows) != 300 || all.Matched != 300 || all.Scanned != 300 {
		t.Fatalf("unlimited: %d rows, %d matched, %d scanned", len(all.Rows), all.Matched, all.Scanned)
	}
	rank := map[string]int{"attention": 0, "stuck": 1, "in_progress": 2}
	for i := 1; i < len(all.Rows); i++ {
		a, b := all.Rows[i-1], all.Rows[i]
		ra, ok := rank[a.Condition]
		if !ok {
			ra = 3
		}
		rb, ok := rank[b.Condition]
		if !ok {
			rb = 3
		}
		if ra > rb || (ra == rb && a.Since.After(b.Since)) {
			t.Fatalf("row %d (%s %s) listed before (%s %s)", i, a.Condition, a.Since, b.Condition, b.Since)
		}
	}
	for _, limit := range []int{1, 7, 100, 299, 300, 500} {
		got, err := idemadmin.List(context.Background(), rs, idemadmin.Filter{Now: now, Limit: limit})
		if err != nil {
			t.Fatal(err)
		}
		want := all.Rows[:min(limit, len(all.Rows))]
		if !slices.EqualFunc(got.Rows, want, func(a, b idemadmin.Row) bool { return a.Key == b.Key }) {
			t.Errorf("limit %d: not the first rows", limit)
		}
	}

	scope := "s-1"
	f := idemadmin.Filter{Now: now, Scope: &scope, State: "done", MinAge: time.Hour}
	got, err := idemadmin.List(context.Background(), rs, f)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range got.Rows {
		if r.Scope != scope || r.State != "done" || r.Age < time.Hour {
			t.Errorf("filter %+v kept %+v", f, r)
		}
	}
	if len(got.Rows) == 0 {
		t.Error("the filter kept nothing")
	}
}

func TestList_ScanError(t *testing.T) {
	_, err := idemadmin.List(context.Background(), failingLister{}, idemadmin.Filter{})
	if !errors.Is(err, idem.ErrUnavailable) {
		t.Fatalf("got %v", err)
	}
	if _, err := idemadmin.List(context.Background(), records{}, idemadmin.Filter{Limit: -1}); err == nil {
		t.Fatal("a negative limit passed")
	}
}

type failingLister struct{}

func (failingLister) Scan(context.Context, func(*idem.Record) bool) error {
	return fmt.Errorf("%w: disk on fire", idem.ErrUnavailable)
}

// TestTell_ReplayFollowsItsOutcome checks the order of a story whose
// replay is timed a little before the completion it replays, as a replay
// answered from memory is (its clock reading may be up to 100 ms old):
// the replay still follows the completion. A rejection keeps its time.
func TestTell_ReplayFollowsItsOutcome(t *testing.T) {
	done := t0.Add(500 * time.Millisecond)
	rec := &idem.Record{
		Format: backend.Format, Scope: "shop-1", Key: "refund:order-7", State: idem.StateDone,
		Fingerprint: "fp", Token: 3, Claims: 1, FirstSeen: t0, ClaimedAt: t0, DoneAt: done,
		ExpiresAt: done.Add(24 * time.Hour),
		Result:    &idem.Result{Status: 201, Body: []byte(`{}`)},
		Attempts:  []backend.Attempt{{Token: 3, ClaimedAt: t0, EndedAt: done, Outcome: "completed", Status: 201}},
		Replays:   2, LastReplay: done.Add(-50 * time.Millisecond),
		Conflicts: 1, LastRejection: t0.Add(100 * time.Millisecond),
	}
	got := events(idemadmin.Tell(rec, t0.Add(time.Minute)))
	want := []string{"first_seen", "claimed", "rejected", "completed", "replayed", "expires"}
	if !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
	// The entry keeps the time the record holds.
	for _, e := range idemadmin.Tell(rec, t0.Add(time.Minute)).Timeline {
		if e.Event == "replayed" && !e.Time.Equal(rec.LastReplay) {
			t.Errorf("replayed at %v, want %v", e.Time, rec.LastReplay)
		}
	}
}

// TestStats_WriteText_DiskAddsUp checks that the disk line names what the
// tables and the value log leave out of the total: idem.wal above all,
// as a figure of its own.
func TestStats_WriteText_DiskAddsUp(t *testing.T) {
	st := &idemadmin.Stats{Now: t0, Disk: &idemadmin.Disk{LSM: 8 << 10, VLog: 8 << 10, Log: 8 << 20, Total: 8<<20 + 20<<10}}
	var b strings.Builder
	if err := st.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if want := "disk               8.0 MiB (tables 8.0 KiB, value log 8.0 KiB, idem.wal 8.0 MiB, memtables and manifest 4.0 KiB)"; !strings.Contains(b.String(), want) {
		t.Fatalf("got\n%s\nwant a line %q", b.String(), want)
	}
}

// A claim the error policy held tells why in its story, read by another
// Store over the same directory (another process, or the page of another
// server): the held entry carries the policy's words.
func TestInspect_PolicyHoldReason(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	clk := idemtest.NewClock(t0)
	unknown := idem.ResolverFunc(func(context.Context, *idem.Record) (idem.Resolution, error) {
		return idem.Resolution{Verdict: idem.VerdictUnknown}, nil
	})
	s, err := idem.Open(dir, &idem.Options{Clock: clk, SweepInterval: -1, Resolver: unknown,
		CloseTimeout: time.Millisecond,
		Policy:       func(idem.Result, error) idem.Decision { return idem.DecisionHold }})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = s.Do(ctx, idem.Request{Scope: "shop-1", Key: "refund:9", Fingerprint: "fp"},
		func(context.Context) (idem.Result, error) { return idem.Result{}, context.DeadlineExceeded })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	other, err := idem.Open(dir, &idem.Options{Clock: clk, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	story, err := idemadmin.Inspect(ctx, other, "shop-1", "refund:9", clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(story.Timeline, func(e idemadmin.Entry) bool { return e.Event == "held" })
	if i < 0 || story.Timeline[i].Detail != "held for recovery: held by the error policy: context deadline exceeded" {
		t.Fatalf("the story does not say why the claim is held: %+v", story.Timeline)
	}
}
