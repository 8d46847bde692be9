package idemotel

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem"
)

// ScopeName is the instrumentation scope of the tracer and meter.
const ScopeName = "github.com/idemkit/idem/idemotel"

// Attribute keys on spans and metrics.
const (
	// AttrScope is the request's idem scope (spans only).
	AttrScope = "idem.scope"
	// AttrKeyDigest is the digest of the idempotency key (spans only): the
	// raw key never leaves the process through telemetry.
	AttrKeyDigest = "idem.key.digest"
	// AttrOutcome is what the request got (see the Outcome constants).
	AttrOutcome = "idem.outcome"
	// AttrAttempt is the number of the claim that ran the effect within
	// the record's life: 1 for the first, 2 after a release, and so on.
	AttrAttempt = "idem.attempt"
	// AttrToken is the fencing token of the claim concerned.
	AttrToken = "idem.token"
	// AttrVerdict is a recovery verdict: committed, not_committed, unknown
	// or attention.
	AttrVerdict = "idem.recovery.verdict"
	// AttrDecision is how the holder ended its claim: completed, released,
	// held or fenced.
	AttrDecision = "idem.decision"
	// AttrRejection is the kind of a rejection: in_progress, mismatch or
	// fenced.
	AttrRejection = "idem.rejection"
	// AttrOperation is the storage operation a duration or error is about.
	AttrOperation = "idem.operation"
	// AttrHTTPStatus is the status a request was answered with
	// (Middleware), as OpenTelemetry's HTTP conventions name it.
	AttrHTTPStatus = "http.response.status_code"
)

// Outcomes, the values of AttrOutcome.
const (
	// OutcomeExecuted: the request claimed the key and its effect ran.
	OutcomeExecuted = "executed"
	// OutcomeReplayed: the request got the saved result of an earlier run.
	OutcomeReplayed = "replayed"
	// OutcomeRecovered: the request met a stale claim, recovery found it
	// committed downstream, and the request got the Resolver's result.
	OutcomeRecovered = "recovered"
	// OutcomeInProgress: another claim held the key (409).
	OutcomeInProgress = "in_progress"
	// OutcomeMismatch: the key was first used with another payload (422).
	OutcomeMismatch = "mismatch"
	// OutcomeUnknown: an earlier attempt's outcome is not known yet; the
	// request did not run.
	OutcomeUnknown = "outcome_unknown"
	// OutcomeInvalid: the key, scope or body was refused before the store
	// was asked.
	OutcomeInvalid = "invalid"
	// OutcomeUnavailable: the store could not be read or written, or was
	// closed; the effect did not run.
	OutcomeUnavailable = "unavailable"
	// OutcomeSkipped: the idempotency middleware let a keyed request
	// through without a claim (a method or route it does not cover).
	OutcomeSkipped = "skipped"
)

// Options configure Telemetry. Nil Options, and every zero field, mean the
// documented default.
type Options struct {
	// TracerProvider makes the tracer of request spans. Default the global
	// provider (otel.GetTracerProvider).
	TracerProvider trace.TracerProvider

	// MeterProvider makes the meter of the metrics. Default the global
	// provider (otel.GetMeterProvider).
	MeterProvider metric.MeterProvider

	// Clock times commit latencies against the times the store puts on its
	// events. Set it to the store's Options.Clock when that is not the
	// system clock. Default idem.SystemClock.
	Clock idem.Clock

	// KeyDigest turns a key into the value of AttrKeyDigest. Default
	// KeyDigest. Set an HMAC with a server secret when keys are guessable
	// (refund:order-123) and traces leave your hands.
	KeyDigest func(key string) string
}

// Telemetry records idem's traces and metrics through OpenTelemetry. Pass
// it to the store as its Observer (it implements idem.Observer) for the
// metrics, and run requests through its Do (or Middleware) for a span per
// request. It is safe for concurrent use.
type Telemetry struct {
	tracer trace.Tracer
	clock  idem.Clock
	digest func(string) string
	inst   instruments

	// watching counts registered watches, so that Observe skips the lock
	// when no request is being traced.
	watching atomic.Int64
	// wmu guards watches: the requests being traced, by key.
	wmu     sync.Mutex
	watches map[string][]*watch

	// cmu guards claims: when each claim this process saw was taken, by
	// (scope, key, token), to measure claim age at its end.
	cmu    sync.Mutex
	claims map[claimID]claimSeen
}

var _ idem.Observer = (*Telemetry)(nil)

// New returns a Telemetry. It fails only if a metric instrument cannot be
// created.
func New(opts *Options) (*Telemetry, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.TracerProvider == nil {
		o.TracerProvider = otel.GetTracerProvider()
	}
	if o.MeterProvider == nil {
		o.MeterProvider = otel.GetMeterProvider()
	}
	if o.Clock == nil {
		o.Clock = idem.SystemClock()
	}
	if o.KeyDigest == nil {
		o.KeyDigest = KeyDigest
	}
	t := &Telemetry{
		tracer:  o.TracerProvider.Tracer(ScopeName),
		clock:   o.Clock,
		digest:  o.KeyDigest,
		watches: make(map[string][]*watch),
		claims:  make(map[claimID]claimSeen),
	}
	inst, err := newInstruments(o.MeterProvider.Meter(ScopeName))
	if err != nil {
		return nil, fmt.Errorf("idemotel: %w", err)
	}
	t.inst = inst
	return t, nil
}

// KeyDigest is the default digest of a key: the first 16 hex digits of its
// SHA-256. It lets an operator find the traces of a key they hold without
// the key being in them. A guessable key can be found from its digest by
// trying candidates: see Options.KeyDigest.
func KeyDigest(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:8])
}
