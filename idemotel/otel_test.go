package idemotel_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/idemotel"
	"github.com/idemkit/idem/idemtest"
)

const key = "refund:order-123"

var req = idem.Request{Scope: "tenant-a", Key: key, Fingerprint: "fp-1"}

func check[T any](t *testing.T, what string, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s:\n got %#v\nwant %#v", what, got, want)
	}
}

func tok(n uint64) string { return strconv.FormatUint(n, 10) }

// refund is an effect that notes its claim's token and takes took on the
// fake clock.
func refund(r *rig, took time.Duration, token *uint64) func(ctx context.Context) (idem.Result, error) {
	return func(ctx context.Context) (idem.Result, error) {
		c, _ := idem.ClaimFromContext(ctx)
		*token = c.Token()
		r.clock.Advance(took)
		return idem.Result{Status: 201, Body: []byte(`{"refund":"re_1"}`)}, nil
	}
}

func TestTelemetry_Do_ExecutedReplayedMismatch(t *testing.T) {
	r := newRig(t, nil, nil)
	ctx := context.Background()
	var token uint64
	var effectSpan trace.SpanContext
	res, replayed, err := r.tel.Do(ctx, r.store, req, func(ctx context.Context) (idem.Result, error) {
		effectSpan = trace.SpanContextFromContext(ctx)
		return refund(r, 3*time.Second, &token)(ctx)
	})
	if err != nil || replayed || res.Status != 201 {
		t.Fatalf("first Do: %v %v %v", res.Status, replayed, err)
	}
	spans := r.spans.GetSpans()
	if len(spans) != 1 || spans[0].SpanContext.SpanID() != effectSpan.SpanID() {
		t.Fatalf("the effect's context does not carry the request span")
	}
	digest := idemotel.KeyDigest(key)
	check(t, "executed span", r.ended(), []spanView{{Name: idemotel.SpanName, Attrs: map[string]string{
		"idem.scope": "tenant-a", "idem.key.digest": digest, "idem.outcome": "executed",
		"idem.token": tok(token), "idem.attempt": "1", "idem.decision": "completed"}}})

	if _, replayed, err := r.tel.Do(ctx, r.store, req, refund(r, 0, new(uint64))); err != nil || !replayed {
		t.Fatalf("repeat: replayed %v, %v", replayed, err)
	}
	check(t, "replayed span", r.ended(), []spanView{{Name: idemotel.SpanName, Attrs: map[string]string{
		"idem.scope": "tenant-a", "idem.key.digest": digest, "idem.outcome": "replayed", "idem.token": tok(token)}}})

	other := req
	other.Fingerprint = "fp-2"
	if _, _, err := r.tel.Do(ctx, r.store, other, refund(r, 0, new(uint64))); !errors.Is(err, idem.ErrMismatch) {
		t.Fatalf("other payload: %v, want ErrMismatch", err)
	}
	check(t, "mismatch span", r.ended(), []spanView{{Name: idemotel.SpanName, Attrs: map[string]string{
		"idem.scope": "tenant-a", "idem.key.digest": digest, "idem.outcome": "mismatch", "idem.token": tok(token)}}})

	check(t, "metrics", r.metrics(t), map[string]any{
		"idem.executions": int64(1),
		"idem.replays":    int64(1),
		"idem.rejections[idem.rejection=mismatch]": int64(1),
		// The fake clock stands still during commits.
		"idem.commit.duration[idem.operation=claim]":    hist{1, 0},
		"idem.commit.duration[idem.operation=complete]": hist{1, 0},
		"idem.claim.age[idem.decision=completed]":       hist{1, 3},
	})
}

func TestTelemetry_Do_InProgress(t *testing.T) {
	r := newRig(t, nil, nil)
	ctx := context.Background()
	claim, _, err := r.store.Begin(ctx, req)
	if err != nil || claim == nil {
		t.Fatalf("Begin: %v", err)
	}
	ran := false
	_, _, err = r.tel.Do(ctx, r.store, req, func(context.Context) (idem.Result, error) { ran = true; return idem.Result{}, nil })
	if !errors.Is(err, idem.ErrInProgress) || ran {
		t.Fatalf("Do during a live claim: ran %v, %v; want ErrInProgress", ran, err)
	}
	check(t, "in-progress span", r.ended(), []spanView{{Name: idemotel.SpanName, Attrs: map[string]string{
		"idem.scope": "tenant-a", "idem.key.digest": idemotel.KeyDigest(key), "idem.outcome": "in_progress",
		"idem.token": tok(claim.Token())}}})
	r.clock.Advance(500 * time.Millisecond)
	if err := claim.Release(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	check(t, "metrics", r.metrics(t), map[string]any{
		"idem.executions": int64(1),
		"idem.rejections[idem.rejection=in_progress]":  int64(1),
		"idem.commit.duration[idem.operation=claim]":   hist{1, 0},
		"idem.commit.duration[idem.operation=release]": hist{1, 0},
		"idem.claim.age[idem.decision=released]":       hist{1, 0.5},
	})
}

// staleClaim leaves a claim on req's key held for recovery, as a crashed
// holder would, and returns its token.
func staleClaim(t *testing.T, r *rig) uint64 {
	t.Helper()
	ctx := context.Background()
	claim, _, err := r.store.Begin(ctx, req)
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	r.clock.Advance(2 * time.Second)
	if err := claim.Hold(ctx); err != nil {
		t.Fatalf("Hold: %v", err)
	}
	r.clock.Advance(r.store.Options().RecoveryGrace) // the grace over: recovery asks the Resolver
	return claim.Token()
}

func TestTelemetry_Do_Recovered(t *testing.T) {
	resolver := idem.ResolverFunc(func(context.Context, *idem.Record) (idem.Resolution, error) {
		return idem.Resolution{Verdict: idem.VerdictCommitted, Result: idem.Result{Status: 201, Body: []byte("downstream")}}, nil
	})
	r := newRig(t, &idem.Options{Resolver: resolver}, nil)
	held := staleClaim(t, r)
	res, replayed, err := r.tel.Do(context.Background(), r.store, req, func(context.Context) (idem.Result, error) {
		t.Error("the effect ran again after recovery found it committed")
		return idem.Result{}, nil
	})
	if err != nil || !replayed || string(res.Body) != "downstream" {
		t.Fatalf("Do after recovery: %q %v %v", res.Body, replayed, err)
	}
	check(t, "recovered span", r.ended(), []spanView{{Name: idemotel.SpanName, Attrs: map[string]string{
		"idem.scope": "tenant-a", "idem.key.digest": idemotel.KeyDigest(key), "idem.outcome": "recovered",
		"idem.token": tok(held), "idem.recovery.verdict": "committed"}}})
	check(t, "metrics", r.metrics(t), map[string]any{
		"idem.executions": int64(1),
		"idem.replays":    int64(1),
		"idem.recovery.verdicts[idem.recovery.verdict=committed]": int64(1),
		"idem.commit.duration[idem.operation=claim]":              hist{1, 0},
		"idem.commit.duration[idem.operation=hold]":               hist{1, 0},
		"idem.claim.age[idem.decision=held]":                      hist{1, 2},
	})
}

func TestTelemetry_Do_RecoveredNotCommittedRunsAgain(t *testing.T) {
	resolver := idem.ResolverFunc(func(context.Context, *idem.Record) (idem.Resolution, error) {
		return idem.Resolution{Verdict: idem.VerdictNotCommitted}, nil
	})
	r := newRig(t, &idem.Options{Resolver: resolver}, nil)
	held := staleClaim(t, r)
	var token uint64
	if _, replayed, err := r.tel.Do(context.Background(), r.store, req, refund(r, time.Second, &token)); err != nil || replayed {
		t.Fatalf("Do after recovery: replayed %v, %v", replayed, err)
	}
	if token == held {
		t.Fatalf("the new claim reused the held claim's token %d", held)
	}
	check(t, "span", r.ended(), []spanView{{Name: idemotel.SpanName, Attrs: map[string]string{
		"idem.scope": "tenant-a", "idem.key.digest": idemotel.KeyDigest(key), "idem.outcome": "executed",
		"idem.token": tok(token), "idem.attempt": "2", "idem.recovery.verdict": "not_committed",
		"idem.decision": "completed"}}})
	check(t, "metrics", r.metrics(t), map[string]any{
		"idem.executions": int64(2),
		"idem.recovery.verdicts[idem.recovery.verdict=not_committed]": int64(1),
		"idem.commit.duration[idem.operation=claim]":                  hist{2, 0},
		"idem.commit.duration[idem.operation=hold]":                   hist{1, 0},
		"idem.commit.duration[idem.operation=complete]":               hist{1, 0},
		"idem.claim.age[idem.decision=held]":                          hist{1, 2},
		"idem.claim.age[idem.decision=completed]":                     hist{1, 1},
	})
}

func TestTelemetry_Do_OutcomeUnknownAndAttention(t *testing.T) {
	resolver := idem.ResolverFunc(func(context.Context, *idem.Record) (idem.Resolution, error) {
		return idem.Resolution{Verdict: idem.VerdictUnknown}, nil
	})
	r := newRig(t, &idem.Options{Resolver: resolver, MaxUnknown: 2, RecheckBackoff: time.Second}, nil)
	held := staleClaim(t, r)
	ctx := context.Background()
	for i, verdict := range []string{"unknown", "attention"} {
		if i > 0 {
			r.clock.Advance(time.Minute) // past the recheck back-off
		}
		_, _, err := r.tel.Do(ctx, r.store, req, refund(r, 0, new(uint64)))
		if !errors.Is(err, idem.ErrOutcomeUnknown) {
			t.Fatalf("Do %d: %v, want ErrOutcomeUnknown", i, err)
		}
		check(t, "span "+verdict, r.ended(), []spanView{{Name: idemotel.SpanName, Attrs: map[string]string{
			"idem.scope": "tenant-a", "idem.key.digest": idemotel.KeyDigest(key), "idem.outcome": "outcome_unknown",
			"idem.token": tok(held), "idem.recovery.verdict": verdict}}})
	}
	m := r.metrics(t)
	check(t, "verdicts", []any{m["idem.recovery.verdicts[idem.recovery.verdict=unknown]"],
		m["idem.recovery.verdicts[idem.recovery.verdict=attention]"]}, []any{int64(1), int64(1)})
}

func TestTelemetry_Do_ErrorReleasesWithoutItsText(t *testing.T) {
	r := newRig(t, nil, nil)
	secret := errors.New("card 4242 4242 4242 4242 declined")
	var token uint64
	_, _, err := r.tel.Do(context.Background(), r.store, req, func(ctx context.Context) (idem.Result, error) {
		c, _ := idem.ClaimFromContext(ctx)
		token = c.Token()
		return idem.Result{}, secret
	})
	if !errors.Is(err, secret) {
		t.Fatalf("Do: %v, want the effect's error", err)
	}
	check(t, "span", r.ended(), []spanView{{Name: idemotel.SpanName, Status: codes.Error,
		Desc: "effect failed or its outcome was not recorded", Attrs: map[string]string{
			"idem.scope": "tenant-a", "idem.key.digest": idemotel.KeyDigest(key), "idem.outcome": "executed",
			"idem.token": tok(token), "idem.attempt": "1", "idem.decision": "released"}}})
	// A retry runs again as attempt 2.
	if _, _, err := r.tel.Do(context.Background(), r.store, req, refund(r, 0, &token)); err != nil {
		t.Fatal(err)
	}
	if got := r.ended(); len(got) != 1 || got[0].Attrs["idem.attempt"] != "2" {
		t.Errorf("retry's span: %+v, want attempt 2", got)
	}
}

func TestTelemetry_Do_PanicReleasesAndReRaises(t *testing.T) {
	r := newRig(t, nil, nil)
	var token uint64
	func() {
		defer func() {
			if p := recover(); p != "boom" {
				t.Errorf("recovered %v, want the effect's panic", p)
			}
		}()
		_, _, _ = r.tel.Do(context.Background(), r.store, req, func(ctx context.Context) (idem.Result, error) {
			c, _ := idem.ClaimFromContext(ctx)
			token = c.Token()
			panic("boom")
		})
	}()
	check(t, "span", r.ended(), []spanView{{Name: idemotel.SpanName, Status: codes.Error, Desc: "effect panicked",
		Attrs: map[string]string{"idem.scope": "tenant-a", "idem.key.digest": idemotel.KeyDigest(key),
			"idem.outcome": "executed", "idem.token": tok(token), "idem.attempt": "1", "idem.decision": "released"}}})
}

// slowCommits advances the fake clock while the backend commits, as a
// slow disk would take time.
type slowCommits struct {
	backend.Backend
	clock *idemtest.Clock
	took  time.Duration
}

func (b slowCommits) Complete(ctx context.Context, scope, key string, token uint64, c backend.Completion) error {
	b.clock.Advance(b.took)
	return b.Backend.Complete(ctx, scope, key, token, c)
}

func TestTelemetry_CommitDuration(t *testing.T) {
	r := newRig(t, nil, func(b backend.Backend, c *idemtest.Clock) backend.Backend {
		return slowCommits{Backend: b, clock: c, took: 7 * time.Millisecond}
	})
	for i := range 3 {
		q := req
		q.Key = fmt.Sprintf("k-%d", i)
		if _, _, err := r.tel.Do(context.Background(), r.store, q, refund(r, 0, new(uint64))); err != nil {
			t.Fatal(err)
		}
	}
	m := r.metrics(t)
	want := hist{3, 3 * (7 * time.Millisecond).Seconds()}
	check(t, "complete duration", m["idem.commit.duration[idem.operation=complete]"], any(want))
	// The claim age runs from the claim to the start of its commit.
	check(t, "claim age", m["idem.claim.age[idem.decision=completed]"], any(hist{3, 0}))
}

func TestKeyDigest(t *testing.T) {
	// The first 16 hex digits of SHA-256("refund:order-123").
	check(t, "digest", idemotel.KeyDigest(key), "d001a327c825704b")

	r := newRig(t, nil, nil, func(o *idemotel.Options) {
		o.KeyDigest = func(k string) string { return "custom:" + strconv.Itoa(len(k)) }
	})
	if _, _, err := r.tel.Do(context.Background(), r.store, req, refund(r, 0, new(uint64))); err != nil {
		t.Fatal(err)
	}
	for _, s := range r.ended() {
		check(t, "digest attribute", s.Attrs["idem.key.digest"], "custom:16")
		for k, v := range s.Attrs {
			if v == key {
				t.Errorf("attribute %s carries the raw key", k)
			}
		}
	}
}

// TestTelemetry_Do_SampledOut: a request whose span is not sampled watches
// nothing and reads nothing more, and the metrics still count it.
func TestTelemetry_Do_SampledOut(t *testing.T) {
	spans := tracetest.NewInMemoryExporter()
	r := newRig(t, nil, nil, func(o *idemotel.Options) {
		o.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()),
			sdktrace.WithSyncer(spans))
	})
	for range 2 {
		if _, _, err := r.tel.Do(context.Background(), r.store, req, refund(r, 0, new(uint64))); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(spans.GetSpans()); n != 0 {
		t.Errorf("%d spans exported, want none", n)
	}
	m := r.metrics(t)
	check(t, "counts", []any{m["idem.executions"], m["idem.replays"]}, []any{int64(1), int64(1)})
}

// BenchmarkTelemetry_Observe is the cost Telemetry adds to each store
// event, here a replay, with the SDK's meter provider behind it.
func BenchmarkTelemetry_Observe(b *testing.B) {
	r := newRig(b, nil, nil)
	e := idem.Event{Kind: idem.EventReplayed, Scope: "tenant-a", Key: key, Token: 7, Time: epoch}
	b.ReportAllocs()
	for b.Loop() {
		r.tel.Observe(e)
	}
}

func TestTelemetry_LateCompletions(t *testing.T) {
	r := newRig(t, nil, nil)
	for _, k := range []idem.EventKind{idem.EventCompletedLate, idem.EventRanTwice, idem.EventRanTwice} {
		r.tel.Observe(idem.Event{Kind: k, Scope: "tenant-a", Key: key, Token: 7})
	}
	check(t, "metrics", r.metrics(t), map[string]any{
		"idem.late_completions[idem.outcome=recorded_late]": int64(1),
		"idem.late_completions[idem.outcome=ran_twice]":     int64(2),
	})
}
