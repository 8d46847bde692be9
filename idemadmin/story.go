package idemadmin

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/keyring"
)

// Story is one record's story as of Now: what it is, and a timeline of
// how it came to be.
type Story struct {
	Scope string `json:"scope"`
	Key   string `json:"key"`
	// State is "in_progress", "done" or "released".
	State string `json:"state"`
	// Condition judges the record at Now: "attention", "stuck",
	// "in_progress", "done", "released" or "expired" (see Row.Condition).
	Condition string `json:"condition"`
	// Summary says in a sentence where the record stands and what happens
	// to the next request with its key.
	Summary     string    `json:"summary"`
	Fingerprint string    `json:"fingerprint"`
	Token       uint64    `json:"token"`
	Claims      int       `json:"claims"`
	FirstSeen   time.Time `json:"first_seen"`
	// LeaseEnds is set for a claim in progress; zero once orphaned.
	LeaseEnds time.Time `json:"lease_ends,omitzero"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// Result summarises the saved result of a done record.
	Result     *ResultSummary `json:"result,omitempty"`
	Replays    int64          `json:"replays"`
	Conflicts  int64          `json:"conflicts"`
	Mismatches int64          `json:"mismatches"`
	// CountsApproximate says Replays, Conflicts and Mismatches are a lower
	// bound, not exact (idem.Store.CountsApproximate): the text and the
	// page show them as "≥ N".
	CountsApproximate bool `json:"counts_approximate,omitempty"`

	// MayHaveRunTwice is the record's mark (idem.Record.MayHaveRunTwice):
	// the timeline's ran_twice entry tells which claim finished late.
	MayHaveRunTwice bool `json:"may_have_run_twice,omitempty"`
	// Timeline holds the story's events, oldest first.
	Timeline []Entry `json:"timeline"`
	// Now is the time the story was told at.
	Now time.Time `json:"now"`
}

// ResultSummary describes a saved result without its body.
type ResultSummary struct {
	Status int `json:"status"`
	// Bytes is the body's length; zero for a sealed result.
	Bytes     int    `json:"bytes"`
	Error     string `json:"error,omitempty"`
	Truncated bool   `json:"truncated,omitempty"`
	// SealedUnder names the key a result is sealed under when the store
	// reading it does not hold that key: its body, headers and error are
	// not shown, only its status and truncation mark.
	SealedUnder string `json:"sealed_under,omitempty"`
	// Sealed says so in words: sealed under key "K" (not given).
	Sealed string `json:"sealed,omitempty"`
}

// Inspect returns the story of the record of (scope, key) in s, judged at
// now, read with idem.Store.Inspect: a result sealed under a key s does
// not hold is marked as sealed (ResultSummary.SealedUnder), and the rest
// of the story is told as for any record.
func Inspect(ctx context.Context, s *idem.Store, scope, key string, now time.Time) (*Story, error) {
	rec, sealedUnder, err := s.Inspect(ctx, scope, key)
	if err != nil {
		return nil, err
	}
	st := tell(rec, sealedUnder, now, s.CountsApproximate(rec))
	return st, nil
}

// Entry is one event of a record's timeline.
type Entry struct {
	// Time is when it happened; zero when the record does not say (such
	// as when a restart orphaned a claim), in which case the entry follows
	// the one before it.
	Time time.Time `json:"time,omitzero"`
	// Event names it: first_seen, claimed, completed, completed_late (a
	// claim recovery had released finished and its result was saved),
	// ran_twice (one finished after the key was claimed again), released, recovered,
	// orphaned, held (why a claim was held for recovery: "panic", "held by
	// the error policy: ..."), note (another note on an open claim),
	// unfinished (a claim
	// that is not the current one and has no outcome), not_kept (claims
	// the record dropped), lease_ends, lease_ended, unknown, attention,
	// replayed, rejected, expires, expired.
	Event string `json:"event"`
	// Token is the fencing token of the claim concerned, if any.
	Token uint64 `json:"token,omitempty"`
	// Detail says what happened, in words.
	Detail string `json:"detail"`
}

// Tell returns rec's story as of now. A record keeps counts of its
// replays and rejections and the time of the last one, so the timeline
// holds one entry for each kind, at the last one. A result still sealed
// (rec as a backend stores it) is marked as sealed, its ciphertext never
// shown as its body. Tell has no Store to ask whether counts were lost:
// the counts are told as rec holds them, unmarked. Inspect asks the
// Store (idem.Store.CountsApproximate) and marks them.
func Tell(rec *idem.Record, now time.Time) *Story {
	id, _ := keyring.Sealed(rec.Result)
	return tell(rec, id, now, false)
}

// tell is Tell of a record whose result is sealed under key sealedUnder,
// if not empty, and whose counts are a lower bound if approx.
func tell(rec *idem.Record, sealedUnder string, now time.Time, approx bool) *Story {
	s := &Story{
		Scope: rec.Scope, Key: rec.Key, State: rec.State.String(), Condition: condition(rec, now),
		Fingerprint: rec.Fingerprint, Token: rec.Token, Claims: rec.Claims, MayHaveRunTwice: rec.MayHaveRunTwice,
		FirstSeen: rec.FirstSeen, ExpiresAt: rec.ExpiresAt,
		Replays: rec.Replays, Conflicts: rec.Conflicts, Mismatches: rec.Mismatches,
		CountsApproximate: approx, Now: now,
	}
	if rec.State == idem.StateInProgress {
		s.LeaseEnds = rec.LeaseEnds
		s.ExpiresAt = time.Time{}
	}
	if rec.State == idem.StateDone && rec.Result != nil {
		s.Result = &ResultSummary{Status: rec.Result.Status, Bytes: len(rec.Result.Body),
			Error: rec.Result.Error, Truncated: rec.Result.Truncated}
		if sealedUnder != "" {
			s.Result = &ResultSummary{Status: rec.Result.Status, Truncated: rec.Result.Truncated,
				SealedUnder: sealedUnder, Sealed: SealedWords(sealedUnder)}
		}
	}
	s.Summary = summary(rec, now)
	if rec.MayHaveRunTwice {
		s.Summary = "may have run twice: a claim finished its effect after recovery had handed the key to " +
			"another (see ran_twice below); " + s.Summary
	}
	s.Timeline = timeline(rec, now, approx)
	return s
}

// SealedWords says that a result is sealed under key id, which the
// reader was not given.
func SealedWords(id string) string {
	return fmt.Sprintf("sealed under key %q (not given)", id)
}

// condition is the record's state as judged at now.
func condition(rec *idem.Record, now time.Time) string {
	switch {
	case rec.State == idem.StateInProgress && rec.Attention:
		return "attention"
	case rec.Stale(now):
		return "stuck"
	case rec.State != idem.StateInProgress && !rec.ExpiresAt.IsZero() && !now.Before(rec.ExpiresAt):
		return "expired"
	default:
		return rec.State.String()
	}
}

func summary(rec *idem.Record, now time.Time) string {
	switch condition(rec, now) {
	case "attention":
		return fmt.Sprintf("needs attention: recovery gave up after %s; every repeat is refused until an operator decides",
			plural(int64(rec.Checks), "inconclusive check", "inconclusive checks"))
	case "stuck":
		why := "its lease ended " + relative(rec.LeaseEnds, now)
		if rec.LeaseEnds.IsZero() {
			why = "a restart orphaned it"
		}
		return "stuck: " + why + "; recovery must learn from the resolver whether its effect happened"
	case "in_progress":
		return "in progress: a live claim (lease ends " + relative(rec.LeaseEnds, now) + "); repeats get 409"
	case "expired":
		return "expired " + relative(rec.ExpiresAt, now) + ": a repeat runs the effect again; the next sweep reclaims it"
	case "done":
		status := "its saved result"
		if rec.Result != nil && rec.Result.Status != 0 {
			status = fmt.Sprintf("status %d", rec.Result.Status)
		}
		return "done: repeats get " + status + " until it expires " + relative(rec.ExpiresAt, now)
	case "released":
		return "released: the next request with this key runs the effect again"
	}
	return rec.State.String()
}

// story gathers the entries of a record's story and where each sorts:
// its time, unless it must follow another.
type story struct {
	out   []Entry
	order []time.Time
}

func (s *story) add(at time.Time, event string, token uint64, format string, args ...any) {
	s.out = append(s.out, Entry{Time: at, Event: event, Token: token, Detail: fmt.Sprintf(format, args...)})
	s.order = append(s.order, at)
}

// note adds what was noted on an open claim, such as a restart orphaning
// it; the record does not say when.
func (s *story) note(a backend.Attempt) {
	if strings.HasPrefix(a.Reason, "orphaned") {
		s.add(time.Time{}, "orphaned", a.Token, "%s: the process holding the claim was gone", a.Reason)
		return
	}
	if a.Reason == "panic" || a.Reason == "held" || strings.HasPrefix(a.Reason, "held by ") {
		s.add(time.Time{}, "held", a.Token, "held for recovery: %s", a.Reason)
		return
	}
	s.add(time.Time{}, "note", a.Token, "%s", a.Reason)
}

// timeline builds the entries of rec's story, oldest first.
func timeline(rec *idem.Record, now time.Time, approx bool) []Entry {
	var s story
	s.add(rec.FirstSeen, "first_seen", 0, "first seen")
	s.attempts(rec, now)
	s.counts(rec, approx)
	s.expiry(rec, now)
	sortEntries(s.out, s.order)
	return s.out
}

// storedAttempts returns rec's attempts, or for a record written before
// attempts were kept, the one its current claim tells of.
func storedAttempts(rec *idem.Record) []backend.Attempt {
	if len(rec.Attempts) > 0 {
		return rec.Attempts
	}
	a := backend.Attempt{Token: rec.Token, ClaimedAt: rec.ClaimedAt, Owner: rec.Owner}
	if rec.State == idem.StateDone {
		a.EndedAt, a.Outcome = rec.DoneAt, "completed"
		if rec.Recovered != "" {
			a.Outcome = "recovered: " + rec.Recovered
		}
		if rec.Result != nil {
			a.Status = rec.Result.Status
		}
	}
	return []backend.Attempt{a}
}

// attempts adds each claim and how it ended.
func (s *story) attempts(rec *idem.Record, now time.Time) {
	attempts := storedAttempts(rec)
	// The record keeps the first claim and the latest ones: number them
	// from the end when claims in between were dropped.
	notKept := max(rec.Claims-len(attempts), 0)
	for i, a := range attempts {
		n := i + 1
		if i > 0 {
			n += notKept
		}
		if i == 1 && notKept > 0 {
			s.add(time.Time{}, "not_kept", 0, "%s not kept (a record keeps the first and the latest %d)",
				plural(int64(notKept), "claim", "claims"), backend.KeptAttempts-1)
		}
		who := ""
		if a.Owner != "" {
			who = " by " + a.Owner
		}
		s.add(a.ClaimedAt, "claimed", a.Token, "claim %d of %d: token %d%s", n, rec.Claims, a.Token, who)
		if a.EndedAt.IsZero() {
			if a.Reason != "" {
				s.note(a)
			}
			if a.Token == rec.Token && rec.State == idem.StateInProgress {
				openClaim(rec, now, s.add)
			} else {
				s.add(time.Time{}, "unfinished", a.Token, "no outcome recorded")
			}
			continue
		}
		s.ended(a)
	}
}

// ended adds how the claim a ended.
func (s *story) ended(a backend.Attempt) {
	switch {
	case a.Outcome == "completed":
		s.add(a.EndedAt, "completed", a.Token, "completed: %s", saved(a.Status))
	case a.Outcome == "completed late":
		s.add(a.EndedAt, "completed_late", a.Token, "completed late, after recovery had ended its claim%s "+
			"and before anyone claimed the key again: %s", why(a.Reason), saved(a.Status))
	case strings.HasPrefix(a.Outcome, "completed late: "):
		s.add(a.EndedAt, "ran_twice", a.Token, "finished late, after recovery had ended its claim%s and the key "+
			"was claimed again: the effect may have run twice; its result (status %d) was not saved",
			why(a.Reason), a.Status)
	case strings.HasPrefix(a.Outcome, "recovered: "):
		if a.Reason != "" {
			s.note(a)
		}
		s.add(a.EndedAt, "recovered", a.Token, "recovered: the resolver said %s; %s",
			strings.TrimPrefix(a.Outcome, "recovered: "), saved(a.Status))
	case strings.HasPrefix(a.Outcome, "settled: "):
		s.add(a.EndedAt, "settled", a.Token, "settled by an operator: %s (%s); %s",
			strings.TrimPrefix(a.Outcome, "settled: "), a.Reason, saved(a.Status))
	case a.Outcome == "released" && strings.HasPrefix(a.Reason, "settled: "):
		s.add(a.EndedAt, "settled", a.Token, "settled by an operator: %s; released, the next request runs it",
			strings.TrimPrefix(a.Reason, "settled: "))
	case a.Outcome == "released" && strings.HasPrefix(a.Reason, "recovered: "):
		s.add(a.EndedAt, "recovered", a.Token, "recovered: %s; released, the next request runs it",
			strings.TrimPrefix(a.Reason, "recovered: "))
	case a.Outcome == "released":
		why := ""
		if a.Reason != "" {
			why = " (" + a.Reason + ")"
		}
		s.add(a.EndedAt, "released", a.Token, "released%s: the next request runs it again", why)
	default:
		s.add(a.EndedAt, a.Outcome, a.Token, "%s", a.Outcome)
	}
}

// counts adds the replays and refusals counted for rec; approx marks the
// counts as a lower bound ("at least").
func (s *story) counts(rec *idem.Record, approx bool) {
	least := ""
	if approx {
		least = "at least "
	}
	if rec.Replays > 0 {
		s.add(rec.LastReplay, "replayed", 0, "replayed %s%s; the last here", least, plural(rec.Replays, "time", "times"))
		// A replay follows the outcome it replays. Its time may read
		// earlier: a replay answered from memory is timed on a clock
		// reading up to 100 ms old, and times print to the second.
		if end := outcomeTime(rec); end.After(rec.LastReplay) {
			s.order[len(s.order)-1] = end
		}
	}
	if rec.Conflicts > 0 || rec.Mismatches > 0 {
		var parts []string
		if rec.Conflicts > 0 {
			parts = append(parts, fmt.Sprintf("%d× 409 (in progress)", rec.Conflicts))
		}
		if rec.Mismatches > 0 {
			parts = append(parts, fmt.Sprintf("%d× 422 (different payload)", rec.Mismatches))
		}
		s.add(rec.LastRejection, "rejected", 0, "refused %s%s; the last here", least, strings.Join(parts, " and "))
	}
}

// expiry adds when rec expires, or that it has.
func (s *story) expiry(rec *idem.Record, now time.Time) {
	if rec.State == idem.StateInProgress || rec.ExpiresAt.IsZero() {
		return
	}
	if now.Before(rec.ExpiresAt) {
		what := "replays until then"
		if rec.State == idem.StateReleased {
			what = "its story is kept until then"
		}
		s.add(rec.ExpiresAt, "expires", 0, "expires: %s", what)
		return
	}
	s.add(rec.ExpiresAt, "expired", 0, "expired: a repeat runs the effect again; not reclaimed yet")
}

// outcomeTime is when rec got the result that repeats replay: its
// completion or recovery, or the latest end of a claim if the record does
// not say.
func outcomeTime(rec *idem.Record) time.Time {
	end := rec.DoneAt
	for _, a := range rec.Attempts {
		if a.EndedAt.After(end) && a.Outcome != "released" {
			end = a.EndedAt
		}
	}
	return end
}

// openClaim adds what is known of the current claim in progress.
func openClaim(rec *idem.Record, now time.Time, add func(time.Time, string, uint64, string, ...any)) {
	switch {
	case rec.LeaseEnds.IsZero():
		// Orphaned: the note said so.
	case now.Before(rec.LeaseEnds):
		add(rec.LeaseEnds, "lease_ends", rec.Token, "lease ends unless its holder extends it")
	default:
		add(rec.LeaseEnds, "lease_ended", rec.Token, "lease ended: awaiting recovery")
	}
	if rec.Checks > 0 {
		next := ""
		if !rec.Attention && !rec.NextCheck.IsZero() {
			next = "; next check " + formatTime(rec.NextCheck)
		}
		add(time.Time{}, "unknown", rec.Token, "the resolver could not tell (%s)%s",
			plural(int64(rec.Checks), "check", "checks"), next)
	}
	if rec.Attention {
		add(time.Time{}, "attention", rec.Token, "needs attention: recovery gave up; an operator must decide")
	}
}

// why is reason in parentheses after a space, or nothing.
func why(reason string) string {
	if reason == "" {
		return ""
	}
	return " (" + reason + ")"
}

func saved(status int) string {
	if status == 0 {
		return "result saved"
	}
	return fmt.Sprintf("status %d saved", status)
}

// sortEntries orders entries by order, their times unless an entry must
// follow another, stably; an entry without a time keeps its place after
// the entry before it.
func sortEntries(es []Entry, order []time.Time) {
	at := make([]time.Time, len(es))
	var last time.Time
	for i := range es {
		if !order[i].IsZero() {
			last = order[i]
		}
		at[i] = last
	}
	idx := make([]int, len(es))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return at[idx[a]].Before(at[idx[b]]) })
	sorted := make([]Entry, len(es))
	for i, j := range idx {
		sorted[i] = es[j]
	}
	copy(es, sorted)
}

// WriteText prints the story for a terminal: a header of facts, then the
// timeline as an aligned table.
func (s *Story) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	p := func(label, format string, args ...any) {
		fmt.Fprintf(tw, "%s\t%s\n", label, fmt.Sprintf(format, args...))
	}
	p("key", "%s", quote(s.Key))
	p("scope", "%s", quote(s.Scope))
	p("state", "%s", s.Summary)
	p("fingerprint", "%s", s.Fingerprint)
	p("token", "%d (%s)", s.Token, plural(int64(s.Claims), "claim", "claims"))
	p("first seen", "%s (%s)", formatTime(s.FirstSeen), relative(s.FirstSeen, s.Now))
	if s.Result != nil {
		r := fmt.Sprintf("status %d, %s", s.Result.Status, formatBytes(int64(s.Result.Bytes)))
		if s.Result.Sealed != "" {
			r = fmt.Sprintf("status %d, %s", s.Result.Status, s.Result.Sealed)
		}
		if s.Result.Truncated {
			r += " (body too large to keep)"
		}
		if s.Result.Error != "" {
			r += ", saved error " + fmt.Sprintf("%q", s.Result.Error)
		}
		p("result", "%s", r)
	}
	ge := ""
	if s.CountsApproximate {
		ge = "≥ "
	}
	p("replays", "%s%d", ge, s.Replays)
	p("rejected", "%s%d× 409, %s%d× 422", ge, s.Conflicts, ge, s.Mismatches)
	if s.CountsApproximate {
		p("counts", "%s", "approximate: a lower bound (counts were lost while the record lived, or the backend cannot tell)")
	}
	if !s.ExpiresAt.IsZero() {
		p("expires", "%s (%s)", formatTime(s.ExpiresAt), relative(s.ExpiresAt, s.Now))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tAGO\tEVENT\tDETAIL")
	for _, e := range s.Timeline {
		t, ago := formatTime(e.Time), relative(e.Time, s.Now)
		if e.Time.IsZero() {
			t, ago = "", ""
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", t, ago, e.Event, e.Detail)
	}
	return tw.Flush()
}
