// Package mcpproxy puts idem's contract in front of an MCP server written
// in any language: a Proxy offers an upstream server's tools, prompts,
// resources and resource templates as they are, and puts idemmcp's Guard in
// front of the write tools (their annotations decide; Options.GuardTools
// and PassTools override), so each (scope, key) reaches the upstream once
// and every repeat gets the first result back. The idem command serves it
// as "idem mcp-proxy"; docs/proxy.md is the operator's guide. It is its own
// package so that package idemproxy, the HTTP proxy, does not link the MCP
// SDK.
//
//	store := idem.New(backend, &idem.Options{Policy: idemproxy.Policy,
//		Resolver: &idemproxy.HTTPResolver{URL: "http://127.0.0.1:8001/idem/resolve"}})
//	p, err := mcpproxy.New(ctx, store, &mcpproxy.Options{
//		Transport: func(context.Context) (mcp.Transport, error) {
//			return &mcp.CommandTransport{Command: exec.Command("node", "server.js")}, nil
//		},
//		Guard: idemmcp.Options{SharedScope: true}})
//	err = p.NewServer().Run(ctx, &mcp.StdioTransport{})
//
// # Semantics
//
// Each client session has its own server (NewServer) and its own upstream
// session, connected when the client has initialized, under the client's
// name and capabilities. Everything but a guarded call's answer passes
// through to the right client: notifications (logging at the client's
// level, progress, list changes, which also re-list, resource updates),
// subscriptions, completions, cancellation, and the upstream's sampling,
// elicitation and roots requests.
//
// A guarded call the upstream could not be sent releases its claim; one it
// was sent and never answered (the child died, the connection dropped, the
// client cancelled it) is an idemproxy.UpstreamError that idemproxy.Policy
// holds, answered as a tool error with idempotencyStatus outcome_unknown,
// and settled by the store's Resolver as for the HTTP proxy.
//
// # Caveats
//
// The proxy speaks the session protocol (ProtocolVersion and earlier) to
// both sides: the stateless protocol's multi round-trip results are not
// forwarded. With a child upstream served over streamable HTTP, each client
// session starts a child.
package mcpproxy
