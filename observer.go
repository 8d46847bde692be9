package idem

import (
	"context"
	"log/slog"
	"time"
)

// EventKind names a transition of a record or a decision about a request.
type EventKind uint8

// The events a Store reports to its Observer.
const (
	// EventClaimed: a request claimed the key; its effect runs now.
	EventClaimed EventKind = iota + 1
	// EventReplayed: a repeat got the saved result.
	EventReplayed
	// EventInProgress: a repeat met a live claim and was told to retry (409).
	EventInProgress
	// EventMismatch: a repeat carried a different fingerprint (422).
	EventMismatch
	// EventCompleted: the holder saved the result.
	EventCompleted
	// EventReleased: the claim was released; the next request runs again.
	EventReleased
	// EventHeld: the holder left the claim in progress for recovery.
	EventHeld
	// EventExtended: the holder's lease was extended (heartbeat).
	EventExtended
	// EventFenced: a stale token was refused.
	EventFenced
	// EventStale: recovery found a claim whose lease ended.
	EventStale
	// EventRecovered: recovery resolved a stale claim (Verdict says how).
	EventRecovered
	// EventUnknown: the resolver could not tell; recovery will ask again.
	EventUnknown
	// EventAttention: recovery gave up on a claim; an operator must decide.
	EventAttention
	// EventExpired: an expired record was reclaimed.
	EventExpired
	// EventError: a storage or resolver call failed.
	EventError
	// EventCompletedLate: a holder whose claim had been recovered (its
	// Complete was fenced) recorded its result, as nobody had claimed the
	// key since; the next request replays it.
	EventCompletedLate
	// EventRanTwice: a holder whose claim had been recovered finished its
	// effect after another holder claimed the key: the effect may have
	// run twice, and the record is marked MayHaveRunTwice.
	EventRanTwice
)

var eventNames = [...]string{
	EventClaimed: "claimed", EventReplayed: "replayed", EventInProgress: "in_progress",
	EventMismatch: "mismatch", EventCompleted: "completed", EventReleased: "released",
	EventHeld: "held", EventExtended: "extended", EventFenced: "fenced", EventStale: "stale",
	EventRecovered: "recovered", EventUnknown: "unknown", EventAttention: "attention",
	EventExpired: "expired", EventError: "error", EventCompletedLate: "completed_late", EventRanTwice: "ran_twice",
}

// String returns the event's name, such as "claimed".
func (k EventKind) String() string {
	if int(k) < len(eventNames) && eventNames[k] != "" {
		return eventNames[k]
	}
	return "event"
}

// Event describes one transition. It never carries a body.
type Event struct {
	Kind       EventKind
	Scope, Key string
	// Token is the fencing token of the claim concerned, if any.
	Token uint64
	// Time is the store's time of the event.
	Time time.Time
	// Verdict is set on recovery events: "committed", "not_committed", "unknown".
	Verdict string
	// Reason explains a release or an error's operation.
	Reason string
	// Err is set on EventError and EventFenced, and on the EventCompleted,
	// EventReleased or EventHeld that ends Do's effect when it returned an
	// error: the error itself, whatever Options.ErrorText keeps of it.
	Err error
}

// Observer receives every event. Observe is called synchronously on the
// request's goroutine and from the background sweep: keep it quick and safe
// for concurrent use.
type Observer interface {
	Observe(Event)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }

// slogObserver returns an Observer that logs every event to l (for
// Options.Logger) with the scope, key and token as attributes: routine
// events at Debug, rejections and recoveries (late completions too) at
// Info, attention and effects that may have run twice at Warn, errors at
// Error. It logs text(err) for an event's error, its full text if text is
// nil.
func slogObserver(l *slog.Logger, text func(error) string) Observer {
	if text == nil {
		text = error.Error
	}
	return ObserverFunc(func(e Event) {
		level := slog.LevelDebug
		switch e.Kind {
		case EventInProgress, EventMismatch, EventStale, EventRecovered, EventUnknown, EventFenced, EventHeld,
			EventCompletedLate:
			level = slog.LevelInfo
		case EventAttention, EventRanTwice:
			level = slog.LevelWarn
		case EventError:
			level = slog.LevelError
		}
		ctx := context.Background()
		if !l.Enabled(ctx, level) {
			return
		}
		attrs := make([]slog.Attr, 0, 6)
		attrs = append(attrs, slog.String("event", e.Kind.String()), slog.String("scope", e.Scope),
			slog.String("key", e.Key), slog.Uint64("token", e.Token))
		if e.Verdict != "" {
			attrs = append(attrs, slog.String("verdict", e.Verdict))
		}
		if e.Reason != "" {
			attrs = append(attrs, slog.String("reason", e.Reason))
		}
		if e.Err != nil {
			attrs = append(attrs, slog.String("error", text(e.Err)))
		}
		l.LogAttrs(ctx, level, "idem "+e.Kind.String(), attrs...)
	})
}

// Observers returns an Observer that hands every event to each of obs in
// turn; nil observers are skipped. Options.Observer takes one observer:
// this is how it takes several.
func Observers(obs ...Observer) Observer {
	var list multiObserver
	for _, o := range obs {
		if o != nil {
			list = append(list, o)
		}
	}
	return list
}

type multiObserver []Observer

func (m multiObserver) Observe(e Event) {
	for _, o := range m {
		o.Observe(e)
	}
}
