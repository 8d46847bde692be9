// Package idemproxy puts idem's contract in front of a tool server written
// in any language: a reverse proxy whose guarded requests go through
// idemhttp's middleware, so each (scope, key) reaches the upstream once and
// every repeat gets the first answer back. The idem command serves it as
// "idem proxy"; package mcpproxy does the same for an MCP server ("idem
// mcp-proxy") on this package's Policy, resolvers and UpstreamError.
// docs/proxy.md is the operator's guide.
//
//	store := idem.New(backend, &idem.Options{Policy: idemproxy.Policy,
//		Resolver: &idemproxy.HTTPResolver{URL: "http://127.0.0.1:8001/idem/resolve"}})
//	scope, _ := idemproxy.ParseScope("header:X-Tenant")
//	p, err := idemproxy.New(store, &idemproxy.Options{Upstream: upstream, Scope: scope})
//
// # Semantics
//
// A request whose method is in Options.Methods (POST, PUT, PATCH, DELETE)
// and that carries an Idempotency-Key is guarded, unless Options.Paths or
// Options.Pass say otherwise; every other request is forwarded as it is
// (Options.RequireKey refuses a keyless write instead). A guarded request
// is answered as idemhttp's middleware answers (400, 401, 409, 413, 422,
// 503, replays), and when it runs, by what the upstream did:
//
//	upstream answered                     its answer, recorded first (5xx, 408, 425
//	                                      and 429 release the claim; others are saved)
//	upstream not reachable (not sent)     502 upstream-unreachable; the claim is released
//	sent, connection dropped              502 upstream-outcome-unknown; the claim is held
//	sent, no answer within Timeout        504 upstream-outcome-unknown; the claim is held
//	answer over MaxResponseBytes          streams to the caller; a repeat gets its status,
//	                                      response-not-kept
//	event stream (text/event-stream)      copied as it comes; saved whole if it fits; cut
//	                                      off, the connection is aborted and the claim held
//
// A held claim is a stale claim: a repeat asks the store's Resolver. With
// HTTPResolver, a URL the operator runs answers committed (with the answer
// to save), not committed (the next repeat runs) or unknown; with
// HoldResolver every stale claim stays held for an operator (idem resolve,
// idem admin) and is never run again. Claims a killed proxy left open are
// orphaned when the store is opened again, and resolved the same way.
//
// # Caveats
//
// The proxy cannot see downstream: whether a dropped request took effect is
// for the resolver to find out, usually by looking the key up where the
// upstream records its effects. A resolver that answers not committed while
// the upstream still holds the request (a slow upstream, after a proxy
// restart) lets the effect run twice unless the upstream deduplicates by the
// Idempotency-Key it is sent: forward it downstream.
//
// Request bodies are read whole (MaxBodyBytes) to be fingerprinted, so a
// guarded request never streams its body to the upstream.
package idemproxy
