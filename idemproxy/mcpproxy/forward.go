//lint:file-ignore SA1019 the MCP proxy passes on every feature of the session protocol, the ones the 2026-07-28 protocol deprecates (sampling, roots, logging) included, for the clients and servers that use them

package mcpproxy

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemmcp"
	"github.com/idemkit/idem/idemproxy"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// What the MCP proxy forwards, each way, for one client session
// (mcpLink): up, tool calls, prompts, resources, subscriptions,
// completions and the logging level; down, the upstream's requests to the
// client. Cancellation needs no code: a client's notifications/cancelled
// cancels the handler's context, and the SDK's client sends
// notifications/cancelled upstream for a call whose context is cancelled.

// callTool forwards a tool call. A call the upstream could not be sent
// returns an idemproxy.UpstreamError that is not Sent (the claim is released); one
// sent and not answered (the upstream died, the connection dropped, the
// client cancelled it), a Sent one (held: it may have acted). A JSON-RPC
// error is the upstream's answer, handed on.
func (l *mcpLink) callTool(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	_, guarded := idem.ClaimFromContext(ctx)
	if n, ok := ctx.Value(noteKey{}).(*mcpNote); ok {
		n.guarded = guarded
	}
	if guarded && l.p.o.At != nil {
		l.p.o.At(idemproxy.PointClaimed, req)
	}
	s, err := l.session(ctx)
	if err == nil {
		err = ctx.Err() // cancelled before it was sent: it cannot have acted
	}
	if err != nil {
		return nil, &idemproxy.UpstreamError{Err: err}
	}
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Meta: req.Params.Meta, Name: req.Params.Name,
		Arguments: req.Params.Arguments})
	var rpcErr *jsonrpc.Error
	switch {
	case errors.As(err, &rpcErr):
		return nil, err
	case err != nil && ctx.Err() != nil:
		// Cancelled by the client (or the proxy stopping) once sent: the
		// SDK told the upstream, which may have acted already. The
		// session is still good.
		return nil, &idemproxy.UpstreamError{Sent: true, Err: fmt.Errorf("cancelled: %w", err)}
	case err != nil:
		l.failed(s)
		return nil, &idemproxy.UpstreamError{Sent: true, Err: err}
	}
	if guarded && l.p.o.At != nil {
		l.p.o.At(idemproxy.PointUpstreamAnswered, req)
	}
	return res, nil
}

// getPrompt forwards prompts/get.
func (l *mcpLink) getPrompt(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
	s, err := l.session(ctx)
	if err != nil {
		return nil, err
	}
	return s.GetPrompt(ctx, req.Params)
}

// readResource forwards resources/read, for resources and templates.
func (l *mcpLink) readResource(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	s, err := l.session(ctx)
	if err != nil {
		return nil, err
	}
	return s.ReadResource(ctx, req.Params)
}

// subscribe forwards resources/subscribe; the upstream's
// notifications/resources/updated come back through the client's handler
// to this session's server, which sends them to its subscribed client.
func (l *mcpLink) subscribe(ctx context.Context, req *mcp.SubscribeRequest) error {
	s, err := l.session(ctx)
	if err != nil {
		return err
	}
	if err := s.Subscribe(ctx, req.Params); err != nil {
		return err
	}
	l.note("", req.Params.URI, true)
	return nil
}

// unsubscribe forwards resources/unsubscribe.
func (l *mcpLink) unsubscribe(ctx context.Context, req *mcp.UnsubscribeRequest) error {
	s, err := l.session(ctx)
	if err != nil {
		return err
	}
	if err := s.Unsubscribe(ctx, req.Params); err != nil {
		return err
	}
	l.note("", req.Params.URI, false)
	return nil
}

// complete forwards completion/complete.
func (l *mcpLink) complete(ctx context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
	s, err := l.session(ctx)
	if err != nil {
		return nil, err
	}
	return s.Complete(ctx, req.Params)
}

// setLevel is the server's receiving middleware: logging/setLevel goes to
// the upstream first, then to the SDK's server, which keeps the level and
// filters the upstream's messages by it.
func (l *mcpLink) setLevel(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method != "logging/setLevel" || l.p.caps.Logging == nil {
			return next(ctx, method, req)
		}
		params, ok := req.GetParams().(*mcp.SetLoggingLevelParams)
		if !ok {
			return next(ctx, method, req)
		}
		s, err := l.session(ctx)
		if err != nil {
			return nil, err
		}
		if err := s.SetLoggingLevel(ctx, params); err != nil {
			return nil, err
		}
		l.note(params.Level, "", false)
		return next(ctx, method, req)
	}
}

// rootsChanged passes the client's notifications/roots/list_changed up.
// The SDK's client sends that notification only when its own roots
// change: adding and removing a placeholder makes it send one, and the
// upstream's roots/list that follows is answered by the client (listRoots).
func (l *mcpLink) rootsChanged(ctx context.Context, _ *mcp.RootsListChangedRequest) {
	l.mu.Lock()
	c := l.client
	l.mu.Unlock()
	if c != nil {
		c.AddRoots(&mcp.Root{URI: "idem-proxy:roots-changed"})
		c.RemoveRoots("idem-proxy:roots-changed")
	}
}

// listRoots is the upstream client's receiving middleware: roots/list is
// answered by the client session, not by the SDK's client.
func (l *mcpLink) listRoots(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method != "roots/list" {
			return next(ctx, method, req)
		}
		down := l.downstream()
		if down == nil {
			return nil, errSessionEnded
		}
		params, _ := req.GetParams().(*mcp.ListRootsParams)
		return down.ListRoots(ctx, params)
	}
}

// sample forwards the upstream's sampling/createMessage to the client.
func (l *mcpLink) sample(ctx context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
	down := l.downstream()
	if down == nil {
		return nil, errSessionEnded
	}
	return down.CreateMessage(ctx, req.Params)
}

// sampleWithTools forwards sampling/createMessage to a client that
// samples with tools.
func (l *mcpLink) sampleWithTools(ctx context.Context, req *mcp.CreateMessageWithToolsRequest) (*mcp.CreateMessageWithToolsResult, error) {
	down := l.downstream()
	if down == nil {
		return nil, errSessionEnded
	}
	return down.CreateMessageWithTools(ctx, req.Params)
}

// elicit forwards the upstream's elicitation/create to the client.
func (l *mcpLink) elicit(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	down := l.downstream()
	if down == nil {
		return nil, errSessionEnded
	}
	return down.Elicit(ctx, req.Params)
}

// logged wraps a tool's handler: an idemproxy.UpstreamError becomes a tool error a
// model can act on (after the Guard held or released the claim), and each
// call gets a log line with the tool, the key and what was decided.
func (p *Proxy) logged(h mcp.ToolHandler) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		n := &mcpNote{}
		res, err := h(context.WithValue(ctx, noteKey{}, n), req)
		decision := "passed through"
		var ue *idemproxy.UpstreamError
		switch {
		case errors.As(err, &ue) && ue.Sent && !n.guarded:
			// Nothing was claimed, so nothing is held: say what happened
			// without idemmcp's status, which would promise a held key.
			decision, res, err = "passed through: outcome unknown", &mcp.CallToolResult{IsError: true,
				Content: []mcp.Content{&mcp.TextContent{Text: req.Params.Name + ": the upstream was sent this call " +
					"and did not answer; it may have acted (" + ue.Err.Error() + ")"}}}, nil
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

// noteKey is the context key of a call's note.
type noteKey struct{}
