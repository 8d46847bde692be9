package idemmcp

import (
	"context"
	"maps"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Handler wraps a raw tool handler: calls of a write tool run once per
// key, and every repeat gets the first result. A tool annotated read-only
// or idempotent is returned as it is. Register the tool as g.Describe(t),
// so that clients learn to send keys, and advertise the server capability
// with g.Capabilities; AddTool and Middleware do both themselves.
func (g *Guard) Handler(t *mcp.Tool, h mcp.ToolHandler) mcp.ToolHandler {
	if !writeTool(t) {
		return h
	}
	name := t.Name
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return g.protect(ctx, name, req, runDo, func(ctx context.Context) (*mcp.CallToolResult, error) {
			return h(ctx, req)
		})
	}
}

// AddTool adds a raw tool to s, protected as Handler protects it, and
// advertises it (the tool's description and _meta, and the server's
// experimental capability) through a receiving middleware on s.
func (g *Guard) AddTool(s *mcp.Server, t *mcp.Tool, h mcp.ToolHandler) {
	s.AddTool(t, h)
	if writeTool(t) {
		s.AddReceivingMiddleware(g.middleware(t, runDo))
	}
}

// AddTool adds a typed tool to s, as mcp.AddTool does, protected by g: its
// calls run once per key, and a repeat gets the first call's whole result
// (content, structured content, isError) marked as replayed. The tool is
// advertised as g.AddTool advertises it.
func AddTool[In, Out any](g *Guard, s *mcp.Server, t *mcp.Tool, h mcp.ToolHandlerFor[In, Out]) {
	mcp.AddTool(s, t, h)
	if writeTool(t) {
		// The SDK's typed handler builds the result the client sees; the
		// middleware protects it whole, structured content included.
		s.AddReceivingMiddleware(g.middleware(t, runDo))
	}
}

// Middleware returns a receiving middleware that protects every write tool
// of the server it is added to, whenever and however it was added: a tool
// not annotated readOnlyHint or idempotentHint. It reads the annotations
// by listing the server's tools through the handlers below it on each
// call. It also advertises: the experimental capability in the initialize
// answer, and a line in each protected tool's description and _meta.
func (g *Guard) Middleware() mcp.Middleware {
	return g.middleware(nil, runDo)
}

// middleware protects only the tool only, or every write tool when only is
// nil, running its effects with do.
func (g *Guard) middleware(only *mcp.Tool, do runner) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			switch method {
			case "initialize":
				res, err := next(ctx, method, req)
				if ir, ok := res.(*mcp.InitializeResult); ok && err == nil && ir != nil {
					cp := *ir
					cp.Capabilities = g.Capabilities(ir.Capabilities)
					return &cp, nil
				}
				return res, err
			case "server/discover":
				// The 2026-07-28 protocol's replacement for initialize.
				res, err := next(ctx, method, req)
				if dr, ok := res.(*mcp.DiscoverResult); ok && err == nil && dr != nil {
					cp := *dr
					cp.Capabilities = g.Capabilities(dr.Capabilities)
					return &cp, nil
				}
				return res, err
			case "tools/list":
				res, err := next(ctx, method, req)
				if lr, ok := res.(*mcp.ListToolsResult); ok && err == nil && lr != nil {
					return g.describeList(lr, only), nil
				}
				return res, err
			case "tools/call":
				creq, ok := req.(*mcp.CallToolRequest)
				if !ok || creq.Params == nil || !g.protects(ctx, next, creq, only) {
					return next(ctx, method, req)
				}
				res, err := g.protect(ctx, creq.Params.Name, creq, do, func(ctx context.Context) (*mcp.CallToolResult, error) {
					r, err := next(ctx, method, req)
					res, _ := r.(*mcp.CallToolResult)
					return res, err
				})
				if res == nil {
					return nil, err
				}
				return res, err
			}
			return next(ctx, method, req)
		}
	}
}

// protects reports whether a call is one the middleware protects.
func (g *Guard) protects(ctx context.Context, next mcp.MethodHandler, req *mcp.CallToolRequest, only *mcp.Tool) bool {
	name := req.Params.Name
	if only != nil {
		return name == only.Name
	}
	if _, tx := g.txTools.Load(name); tx {
		return false // its own middleware runs it in a transaction
	}
	var cursor string
	for {
		r, err := next(ctx, "tools/list", &mcp.ListToolsRequest{Session: req.Session,
			Params: &mcp.ListToolsParams{Cursor: cursor}})
		lr, ok := r.(*mcp.ListToolsResult)
		if err != nil || !ok || lr == nil {
			// Without the list the tool cannot be known to be read-only:
			// protect it, as a write tool.
			return true
		}
		for _, t := range lr.Tools {
			if t != nil && t.Name == name {
				return writeTool(t)
			}
		}
		if lr.NextCursor == "" || lr.NextCursor == cursor {
			return false // an unknown tool: the server answers for it
		}
		cursor = lr.NextCursor
	}
}

// describeList returns lr with the protected tools described.
func (g *Guard) describeList(lr *mcp.ListToolsResult, only *mcp.Tool) *mcp.ListToolsResult {
	cp := *lr
	cp.Tools = make([]*mcp.Tool, len(lr.Tools))
	for i, t := range lr.Tools {
		cp.Tools[i] = t
		if t != nil && writeTool(t) && (only == nil || t.Name == only.Name) {
			cp.Tools[i] = g.Describe(t)
		}
	}
	return &cp
}

// Describe returns a copy of t that tells a client to send keys: a line at
// the end of its description, and an "idempotency" member in its _meta. A
// tool that already has one, or is read-only, is returned as it is.
func (g *Guard) Describe(t *mcp.Tool) *mcp.Tool {
	if t == nil || !writeTool(t) {
		return t
	}
	if _, done := t.Meta[Capability]; done {
		return t
	}
	cp := *t
	line := "Retry-safe: send a new key per intended effect in params._meta." + MetaKey
	info := map[string]any{"metaKey": MetaKey, "required": !g.o.AllowMissingKey}
	if g.o.KeyArgument != "" {
		line += " (or the " + strconv.Quote(g.o.KeyArgument) + " argument)"
		info["keyArgument"] = g.o.KeyArgument
	}
	line += ", and the same key on every retry: a repeat returns the first result, marked _meta." + MetaReplayed + "."
	if cp.Description != "" {
		cp.Description += "\n\n"
	}
	cp.Description += line
	cp.Meta = make(mcp.Meta, len(t.Meta)+1)
	maps.Copy(cp.Meta, t.Meta)
	cp.Meta[Capability] = info
	return &cp
}

// Capabilities returns a copy of caps (or of empty capabilities, if nil)
// with the experimental capability "idempotency": set it as
// mcp.ServerOptions.Capabilities when tools are wrapped with Handler alone.
// Note that non-nil capabilities replace the SDK's default ones.
func (g *Guard) Capabilities(caps *mcp.ServerCapabilities) *mcp.ServerCapabilities {
	var cp mcp.ServerCapabilities
	if caps != nil {
		cp = *caps
	}
	exp := make(map[string]any, len(cp.Experimental)+1)
	maps.Copy(exp, cp.Experimental)
	info := map[string]any{"metaKey": MetaKey, "metaKeys": append([]string(nil), metaKeys[:]...), "replayedMetaKey": MetaReplayed,
		"firstRunAtMetaKey": MetaFirstRunAt, "statusMetaKey": MetaStatus, "retryAfterMetaKey": MetaRetryAfter}
	if g.o.KeyArgument != "" {
		info["keyArgument"] = g.o.KeyArgument
	}
	exp[Capability] = info
	cp.Experimental = exp
	return &cp
}
