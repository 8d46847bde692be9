package idem

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// JournalScope is the scope under which a Journal keeps its steps. It
// starts with ReservedScopePrefix, so no caller's request can use it
// (ValidateScope refuses it, and Begin and Do with it fail with
// ErrInvalidKey). Recovery treats a stale claim in it as not
// committed without asking the Resolver: such a claim is a plan that was
// never saved, so its step was never sent.
const JournalScope = "idem.journal"

// journalRule is how recovery settles a stale claim in JournalScope,
// without the caller's Resolver, which knows nothing of it: such a claim
// is a plan that was never saved, so its step was never sent (not
// committed). Every Store holds it from New on, rather than from NewJournal,
// so that a sweep after a restart, before the run makes its Journal again,
// never hands a journal claim to the Resolver.
func journalRule() recoveryRule {
	return recoveryRule{verdict: VerdictNotCommitted, why: "plan never saved", keep: time.Hour}
}

// defaultJournalRetention is how long a Journal keeps a planned step when
// JournalOptions.Retention is zero: long enough to resume a run days later.
const defaultJournalRetention = 30 * 24 * time.Hour

// JournalOptions configure a Journal. Nil means the defaults.
type JournalOptions struct {
	// Keys derives the steps' idempotency keys. Default KeyDeriver{}.
	Keys KeyDeriver
	// Retention is how long a planned step is kept; set it longer than the
	// longest pause of a run. Default 30 days.
	Retention time.Duration
}

// Journal is the agent side's record of planned steps, kept in a Store. An
// agent plans each tool call once: the step's idempotency key is derived and
// saved with the arguments the model emitted. Planning the same step again,
// after a retry, a crash or a resume days later, returns the saved key and
// arguments, so regenerated arguments never reach the tool and the tool
// sees the same key. A Journal is safe for concurrent use.
type Journal struct {
	s         *Store
	keys      KeyDeriver
	retention time.Duration
}

// NewJournal returns a Journal keeping its steps in s.
func NewJournal(s *Store, opts *JournalOptions) *Journal {
	j := &Journal{s: s, retention: defaultJournalRetention}
	if opts != nil {
		j.keys = opts.Keys
		if opts.Retention > 0 {
			j.retention = opts.Retention
		}
	}
	return j
}

// Step is a planned tool call.
type Step struct {
	// RunID, N (the step number; 0 for a once-per-run effect), Tool and, for
	// an effect, Object name the step.
	RunID  string
	N      int
	Tool   string
	Object string
	// Key is the idempotency key to send with every attempt of the call.
	Key string
	// Args are the arguments saved when the step was first planned: send
	// these, not the ones just regenerated.
	Args []byte
	// PlannedAt is when the step was first planned.
	PlannedAt time.Time
	// Replanned is true when the step had been planned before this call.
	Replanned bool
	// Differed is true when the arguments passed to this call differ in
	// meaning from the saved ones (which are returned in Args).
	Differed bool
}

// Plan records step n of a run calling tool with args (the model's
// arguments, usually JSON), or returns the step as first planned. The key
// is the KeyDeriver's Step key of (runID, n, tool).
func (j *Journal) Plan(ctx context.Context, runID string, n int, tool string, args []byte) (Step, error) {
	st := Step{RunID: runID, N: n, Tool: tool, Key: j.keys.Step(runID, n, tool)}
	return j.plan(ctx, st, args)
}

// PlanEffect records a once-per-run effect on a business object, such as
// "refund:order-123", or returns it as first planned: a later turn that asks
// for the same effect, at whatever step, finds it again and gets the same
// key. The key is the KeyDeriver's Effect key of (runID, object).
func (j *Journal) PlanEffect(ctx context.Context, runID, object, tool string, args []byte) (Step, error) {
	st := Step{RunID: runID, Tool: tool, Object: object, Key: j.keys.Effect(runID, object)}
	return j.plan(ctx, st, args)
}

func (j *Journal) plan(ctx context.Context, st Step, args []byte) (Step, error) {
	fp, err := Fingerprinter{}.Sum("PLAN", st.Tool, jsonOrBytes(args), args)
	if err != nil {
		return st, err
	}
	req := Request{Scope: JournalScope, Key: st.Key, Fingerprint: fp, Retention: j.retention}
	// A concurrent Plan of the same step holds its claim only between its
	// claim and its completion, both immediate: try again a few times.
	for attempt := 0; ; attempt++ {
		c, saved, err := j.s.begin(ctx, req, true)
		var me *MismatchError
		switch {
		case err == nil && c != nil:
			now := j.s.now()
			res := Result{Body: args, Header: map[string][]string{
				"Run": {st.RunID}, "Step": {strconv.Itoa(st.N)}, "Tool": {st.Tool}, "Object": {st.Object},
				"Planned": {now.UTC().Format(time.RFC3339Nano)},
			}}
			if err := c.Complete(ctx, res); err != nil {
				return st, fmt.Errorf("idem: save plan of %s: %w", st.Key, err)
			}
			st.Args, st.PlannedAt = args, now
			return st, nil
		case err == nil:
			return fromSaved(st, saved, false), nil
		case errors.As(err, &me):
			rec, gerr := j.s.Get(ctx, JournalScope, st.Key)
			if gerr != nil {
				return st, gerr
			}
			if now := j.s.now(); rec.State == StateInProgress && rec.Stale(now) && attempt < 100 {
				// A plan claimed with other arguments and never saved: release
				// it (journalRule) and plan afresh.
				if _, rerr := j.s.resolveStale(ctx, rec, now); rerr != nil {
					return st, rerr
				}
				continue
			}
			if rec.State != StateDone || rec.Result == nil {
				return st, err
			}
			return fromSaved(st, rec.Result, true), nil
		case errors.Is(err, ErrInProgress) && attempt < 100:
			select {
			case <-ctx.Done():
				return st, ctx.Err()
			case <-time.After(time.Millisecond):
			}
		default:
			return st, err
		}
	}
}

func fromSaved(st Step, saved *Result, differed bool) Step {
	// A replayed Result is shared (Store.Begin): Args is the caller's.
	st.Args, st.Replanned, st.Differed = bytes.Clone(saved.Body), true, differed
	if v := saved.Header["Planned"]; len(v) == 1 {
		st.PlannedAt, _ = time.Parse(time.RFC3339Nano, v[0])
	}
	return st
}

// jsonOrBytes picks the content type arguments are fingerprinted as: JSON
// when they look like it, so that member order and spacing do not count as
// a difference.
func jsonOrBytes(b []byte) string {
	for _, c := range b {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		case '{', '[':
			return "application/json"
		}
		return "application/octet-stream"
	}
	return "application/octet-stream"
}
