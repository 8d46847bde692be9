// Package idemmcp puts idem's contract on Model Context Protocol tool
// servers and clients built on the official Go SDK
// (github.com/modelcontextprotocol/go-sdk): a write tool runs once per
// idempotency key, and every repeat gets the first call's result back. MCP
// has no idempotency of its own, and a tools/call retried after a timeout
// or a dropped connection would run the tool again.
//
// A tool server protects a typed tool with one call in place of
// mcp.AddTool, or every write tool at once with a middleware:
//
//	store, _ := idem.Open("/var/lib/tools/idem", nil)
//	guard := idemmcp.New(store, &idemmcp.Options{Authenticated: true})
//	idemmcp.AddTool(guard, server, &mcp.Tool{Name: "refund_order"}, refund)
//	// or: server.AddReceivingMiddleware(guard.Middleware())
//
// An agent sends the key it derived when it planned the effect, and
// retries with it:
//
//	client := &idemmcp.Client{Session: session}
//	res, err := client.CallTool(ctx, params, idem.KeyDeriver{}.Step(runID, step, "refund_order"))
//
// # Semantics
//
// MCP names no idempotency key, and clients send it under several names.
// A Guard reads, in this order: params._meta.idempotencyKey (where
// TopLevelKeys and TopLevelKeysHTTP also move a top-level
// params.idempotencyKey, the SEP-3182 shape, since the SDK drops unknown
// members of params); params._meta["io.modelcontextprotocol/idempotency-key"];
// params._meta["io.modelcontextprotocol/idempotencyKey"]; then, if
// Options.KeyArgument names one, that tool argument, which is left out of
// the fingerprint. The same key under several names is one key; two
// different keys in one call are a JSON-RPC invalid-params error (-32602)
// and nothing runs. Keys are 1 to 255 printable ASCII characters, as
// everywhere in idem.
//
// The scope is the tool name joined with: the server's Options.Scope, if
// set; else the stable identity of the authenticated principal (the auth
// info's UserID by default, never the token, which rotates); else, with
// Options.SharedScope, nothing (all callers share one scope per tool).
// Otherwise the call is refused. Never the session id: a client that
// reconnects gets a new session, and its retry must still replay. New
// refuses to build a Guard that was not told which of these it wants.
//
// The fingerprint is the tool name and the arguments in idem's canonical
// JSON: member order, whitespace and escape forms do not matter, numbers
// compare by exact value, and absent arguments equal {}.
//
// Tools annotated readOnlyHint or idempotentHint pass through. A call of a
// write tool meets one of these:
//
//	no key                          tool error, status missing_key (or runs unprotected: AllowMissingKey)
//	malformed key or arguments      tool error, status invalid_key; nothing runs
//	no principal to scope it by     tool error, status unauthenticated; nothing runs
//	first call for (scope, key)     the tool runs; its answer is kept as the store's Policy says
//	repeat, first one done          the saved CallToolResult (content, structuredContent, isError),
//	                                _meta.idempotentReplayed: true, _meta.idempotentFirstRunAt
//	two different keys in one call  JSON-RPC error -32602 (invalid params); nothing runs
//	repeat, first one running       tool error, status in_progress, _meta.retryAfterSeconds
//	repeat with other arguments     tool error, status mismatch, naming the key; nothing runs
//	earlier attempt's outcome unknown   tool error, status outcome_unknown: an operator is resolving it
//	store unavailable               tool error, status unavailable, _meta.retryAfterSeconds; nothing
//	                                ran, and a retry with the same key is safe
//	tool ran, outcome recorded late the tool's answer (its claim was recovered and nobody had
//	                                claimed the key since: the answer is saved and replays)
//	tool ran, key claimed again     tool error, status ran_twice, _meta.retryAfterSeconds: the other
//	                                call's outcome is the recorded one, and a retry gets it
//	tool ran, outcome not recorded  tool error, status outcome_not_recorded; a retry is held until
//	                                recovery decides, never run again
//	AddTxTool's tool ran, taken     tool error, status taken_over: its transaction rolled back,
//	over before it committed        nothing of it stands; a retry gets the other call's outcome
//
// Refusals are tool errors, not protocol errors, so that a model reads
// them and can act; their _meta carries idempotencyStatus, the key and,
// where waiting helps, retryAfterSeconds.
//
// The store's idem.Policy decides what is kept: under idem.DefaultPolicy a
// tool error (isError) is released, so a retry runs the tool again, and a
// successful answer is saved; ToolErrorPolicy saves tool errors too.
// Protocol errors are released under both. A panic in the tool is an
// unknown outcome, as under idem.Store.Do: with a Resolver the claim is
// held for it (a repeat gets outcome_unknown until it decides, then its
// result), without one the claim is released and a retry runs the tool
// again; either way the panic is re-raised. While the tool runs,
// its claim's lease is extended, and its context is cancelled if the
// claim is lost to recovery; idem.ClaimFromContext gives the tool the
// claim's scope, key and fencing token, for a downstream record such as a
// ledger line that a Resolver can find after a crash (SavedResult builds
// the answer a Resolver returns).
//
// A tool whose writes live in the store's own database (pgstore) is added
// with AddTxTool: its handler gets the transaction of idem.DoTx (a
// pgx.Tx), and what it writes commits with the call's record or not at
// all, so a call whose server paused past its lease while another took the
// key over commits nothing, and recovery needs no Resolver for it.
// idemmcp itself does not import pgx: the transaction's type is the type
// parameter.
//
// Servers advertise: Middleware, AddTool and Guard.AddTool add the
// experimental server capability "idempotency" to the initialize (and
// server/discover) answer, and to each protected tool's listing a line at
// the end of its description and an "idempotency" member in its _meta.
//
// The Client retries a call on transport failures (it connects a new
// session through Client.Connect) and on in_progress, unavailable,
// ran_twice and taken_over answers, with the same key and arguments, bounded by MaxAttempts and
// MaxElapsed like idemhttp's Transport; it returns every other answer, and
// a *RetryError when it gives up.
//
// # For client authors
//
// A replay says so inside the result, since an agent sees no HTTP headers:
// its _meta carries idempotentReplayed: true and idempotentFirstRunAt, the
// time (RFC 3339, UTC, milliseconds, such as "2026-12-03T19:30:00.123Z")
// the call whose answer it is began to run: the effect happened then, not
// now. Its content, structuredContent and isError are the first answer's,
// byte for byte; other members of the first answer's _meta are kept. A first
// answer carries neither member. Replayed and FirstRunAt read them.
//
// Clients send the key under any of the names above (in Go, Client and
// WithKey use idempotencyKey); the server advertises which in its
// experimental "idempotency" capability.
//
// # Caveats
//
//   - Middleware learns whether a tool is read-only by listing the
//     server's tools through the handlers below it, on each call of a
//     tool: other middleware there sees a tools/list per call.
//   - A protected tool's answer is made durable before it is sent, but a
//     tool that sends progress or log notifications sends them at once;
//     a replay has none.
//   - An answer that asks for input (multi-round-trip) is not kept: the
//     claim is released, and the call that brings the input runs.
//   - The top-level SEP-3182 key is read only through TopLevelKeys and
//     TopLevelKeysHTTP; without them such a call counts as keyless.
//   - A tool that panics takes the server down, as it would without
//     idemmcp (the SDK does not recover panics), unless a middleware
//     outside the guard recovers; its claim is held for the Resolver (or
//     released without one) first either way.
//   - Retention is the store's (or Options.Retention): a retry after the
//     record expired runs the tool again.
package idemmcp
