package idemproxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemmcp"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// MCPOptions configure an MCP proxy (NewMCP). Connect and one of the
// Guard's scope choices are required.
type MCPOptions struct {
	// Connect connects a new session to the upstream server: a child
	// process over stdio (mcp.CommandTransport) or a streamable HTTP
	// endpoint. NewMCP calls it once, and a call calls it again when the
	// session in use has failed (a child that died is started again).
	Connect func(ctx context.Context) (*mcp.ClientSession, error)

	// Guard configures idemmcp's Guard in front of the write tools: how
	// calls are scoped (SharedScope, Scope or Authenticated), the key
	// argument, retention. Every _meta key name idemmcp reads is read.
	Guard idemmcp.Options

	// GuardTools lists tools guarded whatever their annotations say;
	// PassTools, tools passed through unguarded. Default: the annotations
	// decide, as in idemmcp (readOnlyHint or idempotentHint pass through).
	GuardTools, PassTools []string

	// Logger, if set, gets a line per tool call with the tool, the key
	// and what the proxy decided. Default none.
	Logger *slog.Logger

	// At, if set, is called at PointClaimed and PointUpstreamAnswered of
	// a guarded call: a seam for tests that kill the proxy there.
	At func(Point, *mcp.CallToolRequest)
}

// MCPProxy is an MCP server that offers an upstream server's tools,
// prompts and resources and forwards their calls, with idemmcp's Guard in
// front of the write tools. Serve Server over any transport.
type MCPProxy struct {
	o     MCPOptions
	guard *idemmcp.Guard
	srv   *mcp.Server
	tools []*mcp.Tool // the upstream's, as listed at start

	// mu guards cur and dead: the session in use, and whether it has
	// failed (closed by its transport or by a failed call).
	mu   sync.Mutex
	cur  *mcp.ClientSession
	dead bool
}

// NewMCP connects to the upstream, lists its tools, prompts and resources,
// and returns a proxy that offers them: the same names, schemas,
// annotations and descriptions, the upstream's server name and
// instructions. store must be opened as New requires (Policy and a
// Resolver). It returns an error wrapping ErrInvalidOptions for a bad
// configuration, and the upstream's error when it cannot be listed.
func NewMCP(ctx context.Context, store *idem.Store, opts *MCPOptions) (*MCPProxy, error) {
	switch {
	case opts == nil || opts.Connect == nil:
		return nil, fmt.Errorf("%w: MCPOptions.Connect is required", ErrInvalidOptions)
	case !opts.Guard.Authenticated && opts.Guard.Scope == nil && !opts.Guard.SharedScope:
		return nil, fmt.Errorf("%w: say how calls are scoped (Guard.SharedScope, Scope or Authenticated)", ErrInvalidOptions)
	case store == nil || store.Options().Resolver == nil:
		return nil, fmt.Errorf("%w: a store with a Resolver (HTTPResolver or HoldResolver) is required", ErrInvalidOptions)
	}
	p := &MCPProxy{o: *opts, guard: idemmcp.New(store, &opts.Guard)}
	s, err := p.session(ctx)
	if err != nil {
		return nil, err
	}
	init := s.InitializeResult()
	impl := &mcp.Implementation{Name: "idem-mcp-proxy", Version: "1"}
	var instructions string
	if init != nil && init.ServerInfo != nil {
		impl, instructions = init.ServerInfo, init.Instructions
	}
	p.srv = mcp.NewServer(impl, &mcp.ServerOptions{Instructions: instructions})
	for t, err := range s.Tools(ctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("idemproxy: listing the upstream's tools: %w", err)
		}
		p.addTool(t)
	}
	if init != nil && init.Capabilities != nil && init.Capabilities.Prompts != nil {
		for pr, err := range s.Prompts(ctx, nil) {
			if err != nil {
				return nil, fmt.Errorf("idemproxy: listing the upstream's prompts: %w", err)
			}
			p.srv.AddPrompt(pr, p.getPrompt)
		}
	}
	if init != nil && init.Capabilities != nil && init.Capabilities.Resources != nil {
		for r, err := range s.Resources(ctx, nil) {
			if err != nil {
				return nil, fmt.Errorf("idemproxy: listing the upstream's resources: %w", err)
			}
			p.srv.AddResource(r, p.readResource)
		}
	}
	return p, nil
}

// Server is the MCP server to serve to clients.
func (p *MCPProxy) Server() *mcp.Server { return p.srv }

// Tools returns the upstream's tools as listed at start.
func (p *MCPProxy) Tools() []*mcp.Tool { return slices.Clone(p.tools) }

// Close closes the upstream session.
func (p *MCPProxy) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur == nil {
		return nil
	}
	err := p.cur.Close()
	p.cur, p.dead = nil, true
	return err
}

// addTool offers t, guarded or not as the options and its annotations say.
func (p *MCPProxy) addTool(t *mcp.Tool) {
	if t.InputSchema == nil {
		t.InputSchema = map[string]any{"type": "object"}
	}
	p.tools = append(p.tools, t)
	forward := p.callTool
	switch {
	case slices.Contains(p.o.PassTools, t.Name):
		p.srv.AddTool(t, p.logged(forward))
	case slices.Contains(p.o.GuardTools, t.Name):
		// Guarded as a write tool: its annotations stay as the upstream
		// wrote them for clients, but the Guard judges a copy without the
		// hints that would let it pass.
		g := *t
		if t.Annotations != nil {
			a := *t.Annotations
			a.ReadOnlyHint, a.IdempotentHint = false, false
			g.Annotations = &a
		}
		p.srv.AddTool(t, p.logged(p.guard.Handler(&g, forward)))
	default:
		p.srv.AddTool(t, p.logged(p.guard.Handler(t, forward)))
	}
}

// logged wraps a tool's handler: an UpstreamError becomes a tool error a
// model can act on (after the Guard held or released the claim), and each
// call gets a log line with the tool, the key and what was decided.
func (p *MCPProxy) logged(h mcp.ToolHandler) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		n := &mcpNote{}
		res, err := h(context.WithValue(ctx, noteKey{}, n), req)
		decision := "passed through"
		var ue *UpstreamError
		switch {
		case errors.As(err, &ue) && ue.Sent:
			decision, res, err = "outcome unknown, held", upstreamRefusal(req, idemmcp.StatusOutcomeUnknown,
				"the upstream was sent this call and did not answer; it may have acted, so it will not run again "+
					"until the resolver or an operator settles its key: retry with the same key later", err), nil
		case errors.As(err, &ue):
			decision, res, err = "upstream unreachable, released", upstreamRefusal(req, idemmcp.StatusUnavailable,
				"the upstream could not be reached and the call was not sent: retry with the same key", err), nil
		case err != nil:
			decision = "failed"
		case res != nil && res.Meta[idemmcp.MetaReplayed] == true:
			decision = "replayed"
		case res != nil && res.Meta[idemmcp.MetaStatus] != nil:
			decision = fmt.Sprintf("refused: %v", res.Meta[idemmcp.MetaStatus])
		case n.guarded:
			decision = "ran: recorded"
		}
		p.log(req, decision, err)
		return res, err
	}
}

// upstreamRefusal is the tool error for a call the upstream did not
// answer, in idemmcp's shape (its _meta names the status and the key).
func upstreamRefusal(req *mcp.CallToolRequest, status, text string, err error) *mcp.CallToolResult {
	meta := mcp.Meta{idemmcp.MetaStatus: status}
	if k, ok := req.Params.Meta[idemmcp.MetaKey]; ok {
		meta[idemmcp.MetaKey] = k
	}
	if status == idemmcp.StatusUnavailable {
		meta[idemmcp.MetaRetryAfter] = 1
	}
	return &mcp.CallToolResult{IsError: true, Meta: meta,
		Content: []mcp.Content{&mcp.TextContent{Text: req.Params.Name + ": " + text + " (" + err.Error() + ")"}}}
}

// mcpNote is what forwarding one call learned, for its log line; written
// and read on the call's goroutine.
type mcpNote struct{ guarded bool }

// session returns the upstream session, connecting a new one if there is
// none or the last one failed.
func (p *MCPProxy) session(ctx context.Context) (*mcp.ClientSession, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur != nil && !p.dead {
		return p.cur, nil
	}
	if p.cur != nil {
		_ = p.cur.Close()
	}
	s, err := p.o.Connect(ctx)
	if err != nil {
		p.cur = nil
		return nil, err
	}
	p.cur, p.dead = s, false
	go func() {
		_ = s.Wait()
		p.failed(s)
	}()
	return s, nil
}

// failed marks s as failed, if it is still the session in use.
func (p *MCPProxy) failed(s *mcp.ClientSession) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur == s {
		p.dead = true
	}
}

// callTool forwards a tool call. A call the upstream could not be sent
// returns an UpstreamError that is not Sent (the claim is released); one
// sent and not answered, a Sent one (held). A JSON-RPC error is the
// upstream's answer, handed on.
func (p *MCPProxy) callTool(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	_, guarded := idem.ClaimFromContext(ctx)
	if n, ok := ctx.Value(noteKey{}).(*mcpNote); ok {
		n.guarded = guarded
	}
	if guarded && p.o.At != nil {
		p.o.At(PointClaimed, req)
	}
	s, err := p.session(ctx)
	if err != nil {
		return nil, &UpstreamError{Err: err}
	}
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Meta: req.Params.Meta, Name: req.Params.Name,
		Arguments: req.Params.Arguments})
	var rpcErr *jsonrpc.Error
	switch {
	case errors.As(err, &rpcErr):
		return nil, err
	case err != nil:
		p.failed(s)
		return nil, &UpstreamError{Sent: true, Err: err}
	}
	if guarded && p.o.At != nil {
		p.o.At(PointUpstreamAnswered, req)
	}
	return res, nil
}

// getPrompt forwards prompts/get.
func (p *MCPProxy) getPrompt(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
	s, err := p.session(ctx)
	if err != nil {
		return nil, err
	}
	return s.GetPrompt(ctx, req.Params)
}

// readResource forwards resources/read.
func (p *MCPProxy) readResource(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	s, err := p.session(ctx)
	if err != nil {
		return nil, err
	}
	return s.ReadResource(ctx, req.Params)
}

// log logs a forwarded call.
func (p *MCPProxy) log(req *mcp.CallToolRequest, decision string, err error) {
	if p.o.Logger == nil {
		return
	}
	attrs := []slog.Attr{slog.String("tool", req.Params.Name), slog.String("decision", decision)}
	for _, name := range []string{idemmcp.MetaKey, idemmcp.MetaKeyDashed, idemmcp.MetaKeyNamespaced} {
		if k, ok := req.Params.Meta[name].(string); ok {
			attrs = append(attrs, slog.String("key", k))
			break
		}
	}
	if err != nil {
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	p.o.Logger.LogAttrs(context.Background(), slog.LevelInfo, "idem mcp-proxy", attrs...)
}
