package idemotel

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem"
)

// SpanName is the name of the span Do starts.
const SpanName = "idem.Do"

// maxWatched bounds the events one traced request keeps. An event of the
// kind and token of one kept replaces it (a 409 per poll while idemhttp
// waits, the refusals of concurrent requests while this one runs), so the
// bound is reached only by a long run of distinct claims on the key.
const maxWatched = 32

// watch collects the store's events for one key while a request for it is
// traced. The Observer hook carries no context, so an event is matched to
// a request by its scope and key: see Caveats in the package doc.
type watch struct {
	key, scope string
	anyScope   bool         // the scope is not known yet (Middleware)
	events     []idem.Event // guarded by Telemetry.wmu
}

func (w *watch) add(e idem.Event) {
	if e.Kind == idem.EventExtended {
		return
	}
	for i := range w.events {
		if w.events[i].Kind == e.Kind && w.events[i].Token == e.Token {
			w.events[i] = e
			return
		}
	}
	if len(w.events) < maxWatched {
		w.events = append(w.events, e)
	}
}

func (t *Telemetry) watch(scope, key string, anyScope bool) *watch {
	w := &watch{key: key, scope: scope, anyScope: anyScope}
	t.wmu.Lock()
	t.watches[key] = append(t.watches[key], w)
	t.wmu.Unlock()
	t.watching.Add(1)
	return w
}

// unwatch removes w and returns the events it collected.
func (t *Telemetry) unwatch(w *watch) []idem.Event {
	t.wmu.Lock()
	defer t.wmu.Unlock()
	ws := t.watches[w.key]
	for i, x := range ws {
		if x == w {
			ws = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(t.watches, w.key)
	} else {
		t.watches[w.key] = ws
	}
	t.watching.Add(-1)
	return w.events
}

func (t *Telemetry) deliver(e idem.Event) {
	t.wmu.Lock()
	for _, w := range t.watches[e.Key] {
		if w.anyScope || w.scope == e.Scope {
			w.add(e)
		}
	}
	t.wmu.Unlock()
}

// Do runs s.Do(ctx, req, fn) inside a span named SpanName and returns what
// it returns. The span carries the scope, the key's digest, the outcome
// and the fencing token; an executed request adds its attempt number and
// how its claim ended. fn's context carries the span, so the effect's own
// spans are its children. The token, a recovery verdict and how the claim
// ended come from the store's events: t must be the store's Observer.
//
// The attempt number costs one read of the record (Store.Get) per
// executed request whose span is recorded (sampled).
func (t *Telemetry) Do(ctx context.Context, s *idem.Store, req idem.Request,
	fn func(ctx context.Context) (idem.Result, error)) (idem.Result, bool, error) {
	ctx, span := t.tracer.Start(ctx, SpanName, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(attribute.String(AttrScope, req.Scope), attribute.String(AttrKeyDigest, t.digest(req.Key))))
	if !span.IsRecording() {
		// Sampled out: nothing to annotate, so nothing to watch.
		defer span.End()
		return s.Do(ctx, req, fn)
	}
	w := t.watch(req.Scope, req.Key, false)
	var r reqRun
	finished := false
	defer func() {
		if !finished {
			// fn panicked: Do held the claim for the Resolver (or
			// released it without one) and re-raises.
			r.panicked = true
			annotate(span, t.unwatch(w), r)
		}
		span.End()
	}()
	res, replayed, err := s.Do(ctx, req, func(ctx context.Context) (idem.Result, error) {
		r.claimed(ctx, s, span)
		return fn(ctx)
	})
	finished = true
	r.failed = err != nil
	if !r.ran {
		r.answer = outcomeOf(replayed, err)
	}
	annotate(span, t.unwatch(w), r)
	return res, replayed, err
}

// outcomeOf names the answer of a Do that did not run the effect.
func outcomeOf(replayed bool, err error) string {
	var saved *idem.SavedError
	switch {
	case replayed && err == nil || errors.As(err, &saved):
		return OutcomeReplayed
	case errors.Is(err, idem.ErrInProgress):
		return OutcomeInProgress
	case errors.Is(err, idem.ErrMismatch):
		return OutcomeMismatch
	case errors.Is(err, idem.ErrOutcomeUnknown):
		return OutcomeUnknown
	case errors.Is(err, idem.ErrInvalidKey):
		return OutcomeInvalid
	default:
		return OutcomeUnavailable
	}
}

// reqRun is what a traced request learned beside the store's events.
type reqRun struct {
	ran      bool   // the effect ran in this request
	scope    string // the claim's scope, when it ran
	token    uint64 // the claim's token, when it ran
	attempt  int    // the claim's number, when known
	answer   string // the outcome when the effect did not run
	failed   bool   // the effect or the store returned an error, or a 5xx
	panicked bool
	// learnScope says the span was started without the scope (Middleware).
	learnScope bool
}

// claimed notes the claim of a request whose effect is about to run.
func (r *reqRun) claimed(ctx context.Context, s *idem.Store, span trace.Span) {
	c, ok := idem.ClaimFromContext(ctx)
	if !ok {
		return
	}
	r.ran, r.scope, r.token = true, c.Scope(), c.Token()
	if span.IsRecording() {
		// The claim does not carry its number; the record does.
		if rec, err := s.Get(ctx, c.Scope(), c.Key()); err == nil && rec.Token == r.token {
			r.attempt = rec.Claims
		}
	}
}

// annotate sets the outcome's attributes and status on span from what the
// request returned and the events collected for its key.
func annotate(span trace.Span, events []idem.Event, r reqRun) {
	if !span.IsRecording() {
		return
	}
	o := classify(events, r)
	attrs := make([]attribute.KeyValue, 0, 6)
	attrs = append(attrs, attribute.String(AttrOutcome, o.outcome))
	if r.learnScope && o.scopeKnown {
		attrs = append(attrs, attribute.String(AttrScope, o.scope))
	}
	if o.hasToken {
		attrs = append(attrs, attribute.Int64(AttrToken, int64(o.token)))
	}
	if r.attempt > 0 {
		attrs = append(attrs, attribute.Int(AttrAttempt, r.attempt))
	}
	if o.verdict != "" {
		attrs = append(attrs, attribute.String(AttrVerdict, o.verdict))
	}
	if o.decision != "" {
		attrs = append(attrs, attribute.String(AttrDecision, o.decision))
	}
	span.SetAttributes(attrs...)
	// Never the error's text: it may carry what the effect saw.
	switch {
	case r.panicked:
		span.SetStatus(codes.Error, "effect panicked")
	case o.outcome == OutcomeUnavailable:
		span.SetStatus(codes.Error, "idempotency store unavailable")
	case o.outcome == OutcomeExecuted && r.failed:
		span.SetStatus(codes.Error, "effect failed or its outcome was not recorded")
	}
}

type classified struct {
	outcome           string
	scope             string
	scopeKnown        bool
	token             uint64
	hasToken          bool
	verdict, decision string
}

// classify decides a request's outcome. What the request got decides it;
// the events add the token, a recovery verdict and, for an executed
// request, how its claim ended (the events that carry its token).
func classify(events []idem.Event, r reqRun) classified {
	c := classified{outcome: r.answer}
	if r.ran {
		c.outcome, c.token, c.hasToken, c.scope, c.scopeKnown = OutcomeExecuted, r.token, true, r.scope, true
	}
	for _, e := range events {
		switch e.Kind {
		case idem.EventRecovered:
			// A recovery of this request's own claim (taken over while it
			// ran) shows as a fenced decision, not as a verdict.
			if !r.ran || e.Token != r.token {
				c.verdict = e.Verdict
			}
		case idem.EventUnknown:
			c.verdict = idem.VerdictUnknown.String()
		case idem.EventAttention:
			c.verdict = "attention"
		case idem.EventCompleted, idem.EventReleased, idem.EventHeld, idem.EventFenced:
			if r.ran && e.Token == r.token && c.decision != idem.EventFenced.String() {
				c.decision = e.Kind.String()
			}
		}
	}
	var kind idem.EventKind
	switch c.outcome {
	case OutcomeReplayed:
		if c.verdict == idem.VerdictCommitted.String() {
			c.outcome = OutcomeRecovered
		}
		kind = idem.EventReplayed
	case OutcomeInProgress:
		kind = idem.EventInProgress
	case OutcomeMismatch:
		kind = idem.EventMismatch
	case OutcomeUnknown:
		kind = idem.EventStale
	}
	for i := len(events) - 1; kind != 0 && i >= 0; i-- {
		if e := events[i]; e.Kind == kind {
			c.token, c.hasToken, c.scope, c.scopeKnown = e.Token, true, e.Scope, true
			break
		}
	}
	return c
}
