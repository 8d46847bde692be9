//lint:file-ignore SA1019 the MCP proxy passes on every feature of the session protocol, the ones the 2026-07-28 protocol deprecates (sampling, roots, logging) included, for the clients and servers that use them

package mcpproxy

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemmcp"
	"github.com/idemkit/idem/idemproxy"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ProtocolVersion is the protocol version the MCP proxy asks its
// upstream for, and the newest it offers its clients: the session
// protocol, in which a server sends notifications and requests (sampling,
// elicitation, roots) on the session. The stateless protocol of 2026-07-28
// carries them as multi round-trip results, which the proxy does not
// forward yet.
const ProtocolVersion = "2025-11-25"

// Options configure an MCP proxy (New). Transport and one of the
// Guard's scope choices are required.
type Options struct {
	// Transport returns a new transport to the upstream server: a child
	// process over stdio (mcp.CommandTransport with a new exec.Cmd) or a
	// streamable HTTP endpoint. The proxy connects over it once at start
	// to list what the upstream offers, once per client session (each
	// client gets its own upstream session, as if it had connected
	// directly), and again for a call when that session has failed (a
	// child that died is started again).
	Transport func(ctx context.Context) (mcp.Transport, error)

	// Guard configures idemmcp's Guard in front of the write tools: how
	// calls are scoped (SharedScope, Scope or Authenticated), the key
	// argument, retention. Every _meta key name idemmcp reads is read.
	Guard idemmcp.Options

	// GuardTools lists tools guarded whatever their annotations say;
	// PassTools, tools passed through unguarded. Default: the annotations
	// decide, as in idemmcp (readOnlyHint or idempotentHint pass through).
	GuardTools, PassTools []string

	// Logger, if set, gets a line per tool call with the tool, the key
	// and what the proxy decided, and one per upstream session that could
	// not be connected or re-listed. Default none.
	Logger *slog.Logger

	// At, if set, is called at idemproxy.PointClaimed and idemproxy.PointUpstreamAnswered of
	// a guarded call: a seam for tests that kill the proxy there.
	At func(idemproxy.Point, *mcp.CallToolRequest)
}

// Proxy offers an upstream MCP server's tools, prompts, resources and
// resource templates to clients, with idemmcp's Guard in front of the
// write tools. Each client session gets its own mcp.Server (NewServer)
// paired with its own upstream session, through which everything else
// passes: notifications, progress, cancellation, subscriptions, and the
// upstream's requests to the client (sampling, elicitation, roots).
type Proxy struct {
	o     Options
	guard *idemmcp.Guard
	impl  *mcp.Implementation     // the upstream's, as it introduced itself at start
	instr string                  // the upstream's instructions
	caps  *mcp.ServerCapabilities // the upstream's, offered as they are
	probe *mcp.Server             // answers Handler's checks of a request for an existing session

	// mu guards cat, the upstream's offer as last listed (at start, or by
	// a session re-listing after a list_changed notification), which a
	// new session's server starts from; and links, the sessions that
	// initialized and have not ended, for Close.
	mu    sync.Mutex
	cat   catalog
	links map[*mcpLink]bool
}

// catalog is what an upstream offers, as listed.
type catalog struct {
	tools     []*mcp.Tool
	prompts   []*mcp.Prompt
	resources []*mcp.Resource
	templates []*mcp.ResourceTemplate
}

// New connects to the upstream once, lists its tools, prompts,
// resources and resource templates, and returns a proxy that offers them:
// the same names, schemas, annotations and descriptions, the upstream's
// server name, instructions and capabilities. That first session is
// closed; each client session connects its own (NewServer). store must be
// opened as New requires (Policy and a Resolver); with a nil store the
// proxy forwards every call unguarded (plain forwarding, the same proxy
// without the contract, for comparisons). It returns an error
// wrapping idemproxy.ErrInvalidOptions for a bad configuration, and the upstream's
// error when it cannot be reached or listed.
func New(ctx context.Context, store *idem.Store, opts *Options) (*Proxy, error) {
	switch {
	case opts == nil || opts.Transport == nil:
		return nil, fmt.Errorf("%w: Options.Transport is required", idemproxy.ErrInvalidOptions)
	case store == nil:
		// Plain forwarding: no Guard.
	case !opts.Guard.Authenticated && opts.Guard.Scope == nil && !opts.Guard.SharedScope:
		return nil, fmt.Errorf("%w: say how calls are scoped (Guard.SharedScope, Scope or Authenticated)", idemproxy.ErrInvalidOptions)
	case store.Options().Resolver == nil:
		return nil, fmt.Errorf("%w: a store with a Resolver (HTTPResolver or HoldResolver) is required", idemproxy.ErrInvalidOptions)
	}
	p := &Proxy{o: *opts, links: map[*mcpLink]bool{}}
	if store != nil {
		p.guard = idemmcp.New(store, &opts.Guard)
	}
	t, err := p.o.Transport(ctx)
	if err != nil {
		return nil, err
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "idem-mcp-proxy", Version: "1"},
		&mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}})
	s, err := client.Connect(ctx, t, &mcp.ClientSessionOptions{ProtocolVersion: ProtocolVersion})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	init := s.InitializeResult()
	p.impl, p.caps = &mcp.Implementation{Name: "idem-mcp-proxy", Version: "1"}, &mcp.ServerCapabilities{}
	if init != nil && init.ServerInfo != nil {
		p.impl, p.instr = init.ServerInfo, init.Instructions
	}
	if init != nil && init.Capabilities != nil {
		p.caps = init.Capabilities
	}
	cat, err := list(ctx, s, p.caps, true, true, true)
	if err != nil {
		return nil, err
	}
	p.cat = cat
	p.probe = mcp.NewServer(p.impl, &mcp.ServerOptions{SupportedProtocolVersions: protocolVersions()})
	return p, nil
}

// protocolVersions are the versions the proxy's servers offer: the
// session protocol's, ProtocolVersion and earlier.
func protocolVersions() []string {
	var vs []string
	for _, v := range mcp.SupportedProtocolVersions() {
		if v <= ProtocolVersion {
			vs = append(vs, v)
		}
	}
	return vs
}

// list lists what caps say the upstream offers, of the kinds asked for
// (tools; prompts; resources and their templates), into a catalog whose
// other kinds are empty.
func list(ctx context.Context, s *mcp.ClientSession, caps *mcp.ServerCapabilities, tools, prompts, resources bool) (catalog, error) {
	var c catalog
	if tools {
		for t, err := range s.Tools(ctx, nil) {
			if err != nil {
				return c, fmt.Errorf("mcpproxy: listing the upstream's tools: %w", err)
			}
			if t.InputSchema == nil {
				t.InputSchema = map[string]any{"type": "object"}
			}
			c.tools = append(c.tools, t)
		}
	}
	if prompts && caps.Prompts != nil {
		for pr, err := range s.Prompts(ctx, nil) {
			if err != nil {
				return c, fmt.Errorf("mcpproxy: listing the upstream's prompts: %w", err)
			}
			c.prompts = append(c.prompts, pr)
		}
	}
	if resources && caps.Resources != nil {
		for r, err := range s.Resources(ctx, nil) {
			if err != nil {
				return c, fmt.Errorf("mcpproxy: listing the upstream's resources: %w", err)
			}
			c.resources = append(c.resources, r)
		}
		for rt, err := range s.ResourceTemplates(ctx, nil) {
			if err != nil {
				return c, fmt.Errorf("mcpproxy: listing the upstream's resource templates: %w", err)
			}
			c.templates = append(c.templates, rt)
		}
	}
	return c, nil
}

// NewServer returns the MCP server for one client session: serve it over
// one connection (stdio), or from an mcp.StreamableHTTPHandler's getServer
// for a new session (Handler does). It offers the upstream's catalog as
// last listed and the upstream's capabilities, and connects its own
// upstream session when its client has initialized, with that client's
// name and capabilities (sampling, elicitation, roots), so that the
// upstream sees the client it would have seen without the proxy. The
// upstream session is closed when the client's session ends.
func (p *Proxy) NewServer() *mcp.Server {
	l := &mcpLink{p: p}
	caps := &mcp.ServerCapabilities{Experimental: p.caps.Experimental, Extensions: p.caps.Extensions,
		Completions: p.caps.Completions, Logging: p.caps.Logging, Prompts: p.caps.Prompts,
		Resources: p.caps.Resources, Tools: p.caps.Tools}
	if caps.Tools == nil {
		// The proxy offers tools whatever the upstream says, and says
		// when their list changes.
		caps.Tools = &mcp.ToolCapabilities{ListChanged: true}
	}
	so := &mcp.ServerOptions{Instructions: p.instr, Capabilities: caps,
		SupportedProtocolVersions: protocolVersions(),
		InitializedHandler:        l.initialized,
		RootsListChangedHandler:   l.rootsChanged,
	}
	if caps.Resources != nil && caps.Resources.Subscribe {
		so.SubscribeHandler, so.UnsubscribeHandler = l.subscribe, l.unsubscribe
	}
	if caps.Completions != nil {
		so.CompletionHandler = l.complete
	}
	l.srv = mcp.NewServer(p.impl, so)
	l.srv.AddReceivingMiddleware(l.setLevel)
	p.mu.Lock()
	cat := p.cat
	p.mu.Unlock()
	l.offer(cat, true, true, true)
	return l.srv
}

// Handler returns a streamable HTTP handler that serves a NewServer to
// each new client session.
func (p *Proxy) Handler(opts *mcp.StreamableHTTPOptions) http.Handler {
	return mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		// The handler asks for a server on every request; one that names
		// a session is served by that session's server, found by its id,
		// and the server returned here only checks the protocol version.
		if r.Header.Get("Mcp-Session-Id") != "" {
			return p.probe
		}
		return p.NewServer()
	}, opts)
}

// Tools returns the upstream's tools as last listed.
func (p *Proxy) Tools() []*mcp.Tool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.cat.tools)
}

// Close closes every client session's upstream session. Calls still
// running get an idemproxy.UpstreamError, held when the call was sent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	links := make([]*mcpLink, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		l.close()
	}
	return nil
}

// relisted records a session's new listing of the kinds it re-listed, for
// the servers of sessions that start later.
func (p *Proxy) relisted(c catalog, tools, prompts, resources bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if tools {
		p.cat.tools = c.tools
	}
	if prompts {
		p.cat.prompts = c.prompts
	}
	if resources {
		p.cat.resources, p.cat.templates = c.resources, c.templates
	}
}

// guarded wraps forward, a tool's forwarding to the upstream, in the
// Guard or not, as the options and the tool's annotations say.
func (p *Proxy) guarded(t *mcp.Tool, forward mcp.ToolHandler) mcp.ToolHandler {
	switch {
	case p.guard == nil || slices.Contains(p.o.PassTools, t.Name):
		return p.logged(forward)
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
		return p.logged(p.guard.Handler(&g, forward))
	default:
		return p.logged(p.guard.Handler(t, forward))
	}
}

// log logs a forwarded call.
func (p *Proxy) log(req *mcp.CallToolRequest, decision string, err error) {
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

// warn logs what went wrong outside a call (an upstream session that
// could not be connected, a re-listing that failed).
func (p *Proxy) warn(msg string, err error) {
	if p.o.Logger != nil {
		p.o.Logger.Warn("idem mcp-proxy: "+msg, "error", err)
	}
}
