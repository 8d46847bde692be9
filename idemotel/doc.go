// Package idemotel records idem's traces and metrics through OpenTelemetry:
// a span per request, saying what the request got, and metrics of what the
// store did, through the OTel metric API.
//
// A Telemetry is the store's Observer, for the metrics and for what the
// spans learn from the store's events, and it wraps the requests:
//
//	tel, _ := idemotel.New(nil) // the global tracer and meter providers
//	store, _ := idem.Open(dir, &idem.Options{Observer: tel})
//	res, replayed, err := tel.Do(ctx, store, req, refund)
//
// or, for a tool server, around idemhttp's middleware:
//
//	mw := tel.Middleware(store, idemhttp.Middleware(store, opts))
//	mux.Handle("POST /refunds", mw(refunds))
//
// # Semantics
//
// Do starts a span named SpanName around Store.Do; Middleware starts one
// named MiddlewareSpanName around idemhttp's handling of a request that
// carries an Idempotency-Key. The effect's context carries the span. The
// span's attributes:
//
//	idem.scope              the scope
//	idem.key.digest         KeyDigest of the key (Options.KeyDigest); never the key
//	idem.outcome            executed, replayed, recovered, in_progress, mismatch,
//	                        outcome_unknown, invalid, unavailable (skipped: Middleware
//	                        let the request through without a claim)
//	idem.token              the fencing token: of this request's claim when it
//	                        executed, else of the claim whose record answered
//	idem.attempt            executed only: the claim's number in the record's life
//	idem.decision           executed only: completed, released, held, or fenced
//	                        (recovered and taken over while the effect ran)
//	idem.recovery.verdict   when recovery decided the key during the request:
//	                        committed, not_committed, unknown, attention
//	http.response.status_code  Middleware only
//
// recovered means the request met a stale claim, recovery found its effect
// committed downstream, and the request got the Resolver's result; a
// not_committed verdict is followed by a run, so that request is executed
// with idem.recovery.verdict=not_committed. The span's status is Error
// when the effect failed (an error, a 5xx, a panic, or an outcome that
// could not be recorded) or the store was unavailable; never for a replay
// or a refusal, which are the contract working. No span carries an error's
// text, a body or a header.
//
// The metrics, from the store's events (every path: Do, Begin, idemhttp,
// the background sweep), carry no scope and no key, whose values are
// unbounded:
//
//	idem.executions            counter   claims won: effects started
//	idem.replays               counter   repeats answered with a saved result
//	idem.rejections            counter   by idem.rejection: in_progress, mismatch, fenced
//	idem.recovery.verdicts     counter   by idem.recovery.verdict
//	idem.claim.age             histogram seconds from a claim to its end, by idem.decision
//	idem.commit.duration       histogram seconds a storage commit took, by idem.operation:
//	                                     claim, complete, release, hold
//	idem.errors                counter   failed storage and resolver calls, by idem.operation
//	idem.expired               counter   expired records reclaimed
//	idem.late_completions      counter   effects finished after recovery took their claim, by idem.outcome (recorded_late, ran_twice)
//
// # Caveats
//
// The Observer hook carries no context, so a span learns the store's events
// by their scope and key: an event for the key while the request is in
// flight is read as the request's. What the request itself returned always
// decides the outcome, and an executed request reads only the events that
// carry its own token, so concurrent requests for one key do not mix up
// their outcomes; but a recovery of the key by the background sweep while
// a request is being decided shows on that request's span as its verdict.
// Without t as the store's Observer the spans still carry the outcome, but
// no token on a refusal or replay, no verdict and no decision.
//
// The commit duration is measured from the time the store stamps on a
// claim's or an end's event, read just before the storage call, to the
// moment the event is reported, after the call returned; Options.Clock
// must be the store's clock. Claim age is measured only for claims this
// process saw taken, and at most 65,536 of them are open at once.
//
// The attempt number costs a read of the record (Store.Get) per executed
// request whose span is sampled. Middleware finds the key in the header
// as idemhttp does and learns the scope from the store's events: with the
// same key in two scopes at once, a refused request's span may name the
// other scope and its token.
//
// A digest of a guessable key (refund:order-123) can be reversed by trying
// candidates; set Options.KeyDigest to an HMAC under a server secret when
// traces leave your hands.
package idemotel
