// Package idemhttp puts the Idempotency-Key contract on net/http: a
// middleware for tool servers that runs each keyed request once and
// replays its response to every repeat, and a Transport for the agent side
// that retries with the same key.
//
// A tool server needs one line, and one decision: whose key is it?
//
//	store, _ := idem.Open("/var/lib/tools/idem", nil)
//	keyed := idemhttp.Middleware(store, &idemhttp.Options{Scope: idemhttp.PrincipalScope})
//	mux.Handle("POST /refunds", authenticate(keyed(refunds)))
//
// where authenticate is the server's own layer that verifies the caller
// and records who it is with WithPrincipal. A handler that passes the key
// downstream (a payment provider's idempotency field, a ledger's
// reference) reads it with KeyFromContext, never from the header, which
// may be quoted.
//
// An agent derives the key once, when it plans the effect, and sends it on
// every attempt:
//
//	client := idemhttp.NewClient(nil)
//	req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
//	resp, err := client.Do(idemhttp.WithKey(req, idem.KeyDeriver{}.Step(runID, step, "refund")))
//
// # Semantics
//
// The middleware applies to the methods in Options.Methods (POST and PATCH
// by default) unless Options.Skip says otherwise; other requests pass
// through untouched. A request it applies to is answered as follows:
//
//	missing Idempotency-Key                   400 missing-key
//	malformed key, or the header twice        400 invalid-key
//	Options.Scope failed                      400 invalid-scope (401 if ErrUnauthenticated)
//	                                          (the error's text goes to Options.OnError only)
//	body over Options.MaxBodyBytes            413 body-too-large
//	body not fingerprintable (bad JSON ...)   400 invalid-body
//	first request for (scope, key)            the handler runs; its response is recorded
//	repeat, first one done                    the saved response, Idempotent-Replayed: true
//	repeat, first one still running          409 in-progress, Retry-After (or wait: Options.Wait)
//	repeat with another method, route, media  422 mismatch; the handler does not run
//	type or body
//	earlier attempt's outcome unknown         Options.UnknownStatus (503) outcome-unknown
//	store unavailable or closed               503 unavailable, Retry-After; the handler does not run
//	handler ran, outcome recorded late        the handler's response (its claim was recovered
//	                                          and nobody had claimed the key: the result is saved)
//	handler ran, key claimed again meanwhile  409 ran-twice, Retry-After; the handler's response is
//	                                          dropped: a retry gets the other attempt's outcome
//	handler ran, outcome not recorded         500 outcome-not-recorded; the handler's response is
//	                                          dropped; a retry is held until recovery, never run again
//	repeat, response was too large to keep    first status, response-not-kept, Idempotent-Replayed: true
//
// Refusals are application/problem+json (RFC 9457) with the stable type
// URIs of the Problem* constants; their detail names the key, never the
// body, and never the text of an error of the server's side (a Scope
// function's, the store's): Options.OnError receives those, to log them
// with the server's logger or to redact them into the detail.
//
// The key is accepted bare (abc) or as a structured-field string ("abc");
// both name the same key, which KeyFromContext gives the handler. Its
// record lives under the scope that Options.Scope returns, so the same key
// from two principals is two records and one can never replay the other's
// response, nor learn from a 422 that the other used the key. There is no
// default scope: PrincipalScope scopes by the verified subject of the
// server's authentication layer (WithPrincipal), SharedScope puts every
// caller in one scope for a single-tenant server, and any other function
// will do if it names the same caller on every retry. A digest of the
// credentials does not: bearer tokens rotate, and a retry sent after a
// token refresh would land in a new scope and run the effect again. The fingerprint
// is idem's canonical digest of the method, the route (Options.Route: the
// path and sorted query by default), the media type of the Content-Type
// header with the parameters that change what the body means (a multipart
// boundary, a charset other than UTF-8 for a non-JSON type) and the body:
// JSON bodies compare by meaning, other bodies byte for byte. The same
// bytes sent without a Content-Type, or as text/plain where the first
// request said application/json, are another request (422).
//
// The handler's response is recorded, and the store's idem.Policy decides
// what happens to it: by default 5xx release the claim (a retry runs
// again) and everything else is saved; StatusPolicy also releases 408, 425
// and 429. A panic in the handler (http.ErrAbortHandler included) is an
// unknown outcome, since the handler may have acted before it: when the
// store has a Resolver the claim is held for it (in progress, its lease
// ended), and the Resolver decides on the next request with the key or
// the next sweep whether the effect committed, which is what a repeat
// gets; without one the claim is released and a retry runs the handler
// again. Either way the panic is re-raised, so net/http aborts the
// response. While the
// handler runs, its claim's lease is extended every Lease/3, and the
// request context is cancelled if the claim is lost to recovery.
//
// Saved are the status, the headers of Options.SavedHeaders (never
// Set-Cookie), and the body up to Options.MaxResponseBytes. A larger
// response runs once and reaches the first caller whole; only the fact
// that it ran is saved, and a repeat gets a response-not-kept problem with
// the first run's status: it learns that the effect happened, and it never
// happens twice.
//
// The response is held back until it is saved: when the handler returns,
// the result is made durable first and then sent, so that a client never
// holds an answer the store could forget. A handler that flushes (server-
// sent events, progress) or whose response outgrows MaxResponseBytes
// switches the recorder to streaming: what it wrote goes out at once, every
// later write goes straight through, http.Flusher and
// http.ResponseController keep working, and the result is saved when the
// handler returns. A handler that never calls WriteHeader answers 200, as
// under net/http.
//
// The Transport retries a request that carries a key, or has a safe
// method, on connection errors, timeouts and 409, 429, 502, 503 and 504,
// with exponential backoff and full jitter or the server's Retry-After,
// until Transport.MaxAttempts or Transport.MaxElapsed; it re-sends the
// body each time. It never retries an unsafe request without a key. When it
// gives up it returns a *RetryError naming the key and the attempts, with
// the last response's Problem, and the requests that reached a connection:
// Go's http.Transport itself re-sends a keyed request when a reused
// keep-alive connection fails before any response, so a server may see
// more requests than attempts.
//
// Inside an effect, DownstreamKeys sets on the requests the effect sends
// to other APIs an Idempotency-Key derived from the claim
// (idem.DownstreamKey): the same in every attempt, the one that runs after
// recovery included, so an API that deduplicates by it acts once. SetFence
// sends the claim's own key and fencing token instead, for a downstream
// that keeps the highest token it saw.
//
// # Caveats
//
//   - The request body is read whole into memory (bounded by MaxBodyBytes)
//     before the handler runs, and so is the response copy (bounded by
//     MaxResponseBytes). Streaming uploads do not belong behind it.
//   - A streamed response reaches the client before it is saved: if the
//     process dies in between, the claim is orphaned and recovery decides
//     through the store's Resolver, as for any crash after the effect.
//   - If the result cannot be saved (the store failed after the handler
//     ran), the first caller still gets the handler's response; the claim
//     stays in progress for recovery, and repeats get 409 or
//     outcome-unknown until it is resolved, never a second run.
//   - Headers set after WriteHeader reach the first caller while the
//     response is still held back (net/http would ignore them), and
//     trailers reach only the first caller: neither is saved.
//   - A handler that hijacks the connection (as one that aborts a response
//     does), or writes through the writer that http.ResponseController
//     unwraps to, bypasses the recorder: what it sends is not kept. The
//     request is recorded as "ran, response not kept", as a response over
//     MaxResponseBytes is, and a repeat gets ProblemResponseNotKept (status
//     500, since no status of the first run is known), never a second run
//     and never a status no one wrote.
//   - Options.Route defaults to the concrete path. A route pattern (chi's
//     or r.Pattern) leaves out path parameters: use it only when they are
//     also in the body, or a key reused on /orders/1 and /orders/2 would
//     replay the first order's response for the second.
//   - A replay is the saved response as it was: headers that outer
//     middleware sets per request (request ids, dates) are set afresh.
//   - Retry-After on 409 is a hint (Options.RetryAfter, one second by
//     default), not the lease end, which is only when a dead holder's claim
//     would be recovered.
//   - The Transport buffers a request body that has no GetBody, to send it
//     again. Its AttemptTimeout and the cancelling of an attempt at
//     MaxElapsed run on the wall clock, whatever Transport.Clock is.
package idemhttp
