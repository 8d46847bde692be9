package idemotel

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/idemkit/idem"
)

// Metric names. Metrics carry no scope and no key: both are unbounded, and
// a metric's attributes must not be.
const (
	// MetricExecutions counts claims won: effects started.
	MetricExecutions = "idem.executions"
	// MetricReplays counts repeats answered with a saved result.
	MetricReplays = "idem.replays"
	// MetricRejections counts refusals by AttrRejection: in_progress (409),
	// mismatch (422), and fenced (a holder's stale token refused).
	MetricRejections = "idem.rejections"
	// MetricClaimAge is the age of a claim when its holder ended it, in
	// seconds, by AttrDecision (completed, released, held, fenced): how
	// long effects hold their keys.
	MetricClaimAge = "idem.claim.age"
	// MetricRecoveryVerdicts counts recovery's answers about stale claims
	// by AttrVerdict (committed, not_committed, unknown, attention).
	MetricRecoveryVerdicts = "idem.recovery.verdicts"
	// MetricCommitDuration is how long a storage commit took, in seconds,
	// by AttrOperation (claim, complete, release, hold).
	MetricCommitDuration = "idem.commit.duration"
	// MetricErrors counts failed storage and resolver calls by
	// AttrOperation (the store's Event.Reason, such as claim or resolve).
	MetricErrors = "idem.errors"
	// MetricExpired counts expired records reclaimed.
	MetricExpired = "idem.expired"
	// MetricLateCompletions counts effects whose holder finished after its
	// claim was recovered, by AttrOutcome: recorded_late (the late result
	// was saved and replays) or ran_twice (another holder had claimed the
	// key since: the effect may have run twice, and the record is marked).
	MetricLateCompletions = "idem.late_completions"
)

// maxClaimsSeen bounds the claims whose start Telemetry remembers for
// MetricClaimAge. A claim whose end this process never sees (it was taken
// over by another process) stays until the bound makes room; past it new
// claims go unmeasured rather than memory growing.
const maxClaimsSeen = 1 << 16

// Latency buckets in seconds: a synced commit takes from a fraction of a
// millisecond to tens of milliseconds; claims from milliseconds to minutes.
var (
	commitBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}
	ageBuckets    = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 1800}
)

type instruments struct {
	executions, replays, rejections, verdicts, errors, expired metric.Int64Counter
	late                                                       metric.Int64Counter
	claimAge, commit                                           metric.Float64Histogram

	// Attribute sets made once: recording with a prepared set allocates
	// nothing on the request path.
	rejInProgress, rejMismatch, rejFenced           metric.MeasurementOption
	opClaim, opComplete, opRelease, opHold          metric.MeasurementOption
	endCompleted, endReleased, endHeld, endFenced   metric.MeasurementOption
	vCommitted, vNotCommitted, vUnknown, vAttention metric.MeasurementOption
	lateRecorded, lateRanTwice                      metric.MeasurementOption
}

func newInstruments(m metric.Meter) (instruments, error) {
	var in instruments
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	histogram := func(name, desc string, buckets []float64) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(buckets...))
		errs = append(errs, err)
		return h
	}
	in.executions = counter(MetricExecutions, "{execution}", "Claims won: effects started.")
	in.replays = counter(MetricReplays, "{replay}", "Repeats answered with a saved result.")
	in.rejections = counter(MetricRejections, "{rejection}", "Requests and holders refused, by kind.")
	in.verdicts = counter(MetricRecoveryVerdicts, "{verdict}", "Recovery's answers about stale claims.")
	in.errors = counter(MetricErrors, "{error}", "Failed storage and resolver calls.")
	in.expired = counter(MetricExpired, "{record}", "Expired records reclaimed.")
	in.late = counter(MetricLateCompletions, "{completion}", "Effects finished after their claim was recovered.")
	in.claimAge = histogram(MetricClaimAge, "Age of a claim when its holder ended it.", ageBuckets)
	in.commit = histogram(MetricCommitDuration, "Duration of a storage commit.", commitBuckets)

	set := func(k, v string) metric.MeasurementOption {
		return metric.WithAttributeSet(attribute.NewSet(attribute.String(k, v)))
	}
	in.rejInProgress, in.rejMismatch, in.rejFenced = set(AttrRejection, "in_progress"), set(AttrRejection, "mismatch"), set(AttrRejection, "fenced")
	in.opClaim, in.opComplete, in.opRelease, in.opHold = set(AttrOperation, "claim"), set(AttrOperation, "complete"),
		set(AttrOperation, "release"), set(AttrOperation, "hold")
	in.endCompleted, in.endReleased, in.endHeld, in.endFenced = set(AttrDecision, "completed"), set(AttrDecision, "released"),
		set(AttrDecision, "held"), set(AttrDecision, "fenced")
	in.vCommitted, in.vNotCommitted, in.vUnknown, in.vAttention = set(AttrVerdict, "committed"), set(AttrVerdict, "not_committed"),
		set(AttrVerdict, "unknown"), set(AttrVerdict, "attention")
	in.lateRecorded, in.lateRanTwice = set(AttrOutcome, "recorded_late"), set(AttrOutcome, "ran_twice")
	return in, errors.Join(errs...)
}

type claimID struct {
	scope, key string
	token      uint64
}

type claimSeen struct{ at time.Time }

// Observe records the metrics of one store event and annotates the spans
// of the requests for its key that are being traced. The store calls it;
// it does not block.
func (t *Telemetry) Observe(e idem.Event) {
	// Metrics are recorded with a background context: the Observer hook
	// carries none, so exemplars cannot link them to a span.
	ctx := context.Background()
	in := &t.inst
	switch e.Kind {
	case idem.EventClaimed:
		in.executions.Add(ctx, 1)
		t.commitTook(ctx, e, in.opClaim)
		t.claimStarted(e)
	case idem.EventReplayed:
		in.replays.Add(ctx, 1)
	case idem.EventInProgress:
		in.rejections.Add(ctx, 1, in.rejInProgress)
	case idem.EventMismatch:
		in.rejections.Add(ctx, 1, in.rejMismatch)
	case idem.EventCompleted:
		t.commitTook(ctx, e, in.opComplete)
		t.claimEnded(ctx, e, in.endCompleted)
	case idem.EventReleased:
		t.commitTook(ctx, e, in.opRelease)
		t.claimEnded(ctx, e, in.endReleased)
	case idem.EventHeld:
		t.commitTook(ctx, e, in.opHold)
		t.claimEnded(ctx, e, in.endHeld)
	case idem.EventFenced:
		in.rejections.Add(ctx, 1, in.rejFenced)
		t.claimEnded(ctx, e, in.endFenced)
	case idem.EventRecovered:
		switch e.Verdict {
		case idem.VerdictCommitted.String():
			in.verdicts.Add(ctx, 1, in.vCommitted)
		case idem.VerdictNotCommitted.String():
			in.verdicts.Add(ctx, 1, in.vNotCommitted)
		}
	case idem.EventUnknown:
		in.verdicts.Add(ctx, 1, in.vUnknown)
	case idem.EventAttention:
		in.verdicts.Add(ctx, 1, in.vAttention)
	case idem.EventError:
		in.errors.Add(ctx, 1, metric.WithAttributes(attribute.String(AttrOperation, e.Reason)))
	case idem.EventExpired:
		in.expired.Add(ctx, 1)
	case idem.EventCompletedLate:
		in.late.Add(ctx, 1, in.lateRecorded)
	case idem.EventRanTwice:
		in.late.Add(ctx, 1, in.lateRanTwice)
	}
	if t.watching.Load() > 0 {
		t.deliver(e)
	}
}

// commitTook records how long the commit an event reports took. The store
// stamps a claim's and an end's event with the time it read just before
// the storage call, and reports the event when the call has returned.
func (t *Telemetry) commitTook(ctx context.Context, e idem.Event, op metric.MeasurementOption) {
	if e.Time.IsZero() {
		return
	}
	t.inst.commit.Record(ctx, max(t.clock.Now().Sub(e.Time), 0).Seconds(), op)
}

func (t *Telemetry) claimStarted(e idem.Event) {
	t.cmu.Lock()
	if len(t.claims) < maxClaimsSeen {
		t.claims[claimID{e.Scope, e.Key, e.Token}] = claimSeen{at: e.Time}
	}
	t.cmu.Unlock()
}

// claimEnded records the age of a claim this process saw start. A fenced
// event ends this holder's part too: its claim is no longer current.
func (t *Telemetry) claimEnded(ctx context.Context, e idem.Event, decision metric.MeasurementOption) {
	id := claimID{e.Scope, e.Key, e.Token}
	t.cmu.Lock()
	seen, ok := t.claims[id]
	delete(t.claims, id)
	t.cmu.Unlock()
	if !ok {
		return
	}
	at := e.Time
	if at.IsZero() {
		at = t.clock.Now()
	}
	t.inst.claimAge.Record(ctx, max(at.Sub(seen.at), 0).Seconds(), decision)
}
