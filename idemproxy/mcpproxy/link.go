//lint:file-ignore SA1019 the MCP proxy passes on every feature of the session protocol, the ones the 2026-07-28 protocol deprecates (sampling, roots, logging) included, for the clients and servers that use them

package mcpproxy

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// mcpLink pairs one client session (its server, srv) with its own
// upstream session, and passes between them what the Guard does not
// answer: calls, reads and gets forwarded up; notifications, progress and
// the upstream's requests (sampling, elicitation, roots) forwarded down.
type mcpLink struct {
	p   *Proxy
	srv *mcp.Server // this session's server; it has at most one session

	// mu guards the rest: the client session (down, once initialized),
	// the upstream client made for it, the upstream session in use and
	// whether it failed, whether the client session ended, what srv
	// offers, and what the client set up upstream.
	mu     sync.Mutex
	down   *mcp.ServerSession
	client *mcp.Client
	cur    *mcp.ClientSession
	dead   bool
	closed bool

	// The names srv offers, to remove what a re-listing left out, and
	// the listing each kind was last offered from (as JSON), to leave a
	// kind that did not change alone: offering it again would tell the
	// client it changed.
	tools, prompts, resources, templates []string
	listed                               [3]string

	// What the client set up on the upstream session, to set up again on
	// the next one when it fails (a restarted child is a new server): the
	// logging level, and the resources subscribed to. connects counts the
	// sessions connected.
	level      mcp.LoggingLevel
	subscribed map[string]bool
	connects   int
}

// errSessionEnded is a call's error when its client session has ended.
var errSessionEnded = errors.New("mcpproxy: the client session has ended")

// initialized is the server's InitializedHandler: the client is known, so
// its upstream client is made in its image and connected, for the
// upstream's notifications to flow before the first call.
func (l *mcpLink) initialized(ctx context.Context, req *mcp.InitializedRequest) {
	l.mu.Lock()
	l.down = req.Session
	l.client = l.newClient(req.Session.InitializeParams())
	l.mu.Unlock()
	l.p.mu.Lock()
	l.p.links[l] = true
	l.p.mu.Unlock()
	go func() {
		_ = req.Session.Wait()
		l.close()
	}()
	go func() {
		// Listed again on this session: the upstream's lists may have
		// changed since the proxy started, without a notification to it.
		if _, err := l.session(context.WithoutCancel(ctx)); err != nil {
			l.p.warn("connecting the upstream for a new session", err)
			return
		}
		l.relist(true, true, true)
	}()
}

// newClient returns the upstream client for a client session that
// introduced itself with params: its name and version, its capabilities
// (sampling, elicitation, roots), and handlers that pass what the
// upstream sends to it.
func (l *mcpLink) newClient(params *mcp.InitializeParams) *mcp.Client {
	impl := &mcp.Implementation{Name: "idem-mcp-proxy", Version: "1"}
	caps := &mcp.ClientCapabilities{}
	if params != nil && params.ClientInfo != nil {
		impl = params.ClientInfo
	}
	o := &mcp.ClientOptions{Capabilities: caps,
		ToolListChangedHandler: func(ctx context.Context, _ *mcp.ToolListChangedRequest) {
			go l.relist(true, false, false)
		},
		PromptListChangedHandler: func(ctx context.Context, _ *mcp.PromptListChangedRequest) {
			go l.relist(false, true, false)
		},
		ResourceListChangedHandler: func(ctx context.Context, _ *mcp.ResourceListChangedRequest) {
			go l.relist(false, false, true)
		},
		ResourceUpdatedHandler: func(ctx context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
			_ = l.srv.ResourceUpdated(ctx, req.Params)
		},
		LoggingMessageHandler: func(ctx context.Context, req *mcp.LoggingMessageRequest) {
			if down := l.downstream(); down != nil {
				_ = down.Log(ctx, req.Params)
			}
		},
		ProgressNotificationHandler: func(ctx context.Context, req *mcp.ProgressNotificationClientRequest) {
			if down := l.downstream(); down != nil {
				_ = down.NotifyProgress(ctx, req.Params)
			}
		},
	}
	if params != nil && params.Capabilities != nil {
		dc := params.Capabilities
		caps.Experimental, caps.Extensions = dc.Experimental, dc.Extensions
		if dc.RootsV2 != nil || dc.Roots.ListChanged {
			caps.RootsV2 = &mcp.RootCapabilities{ListChanged: dc.Roots.ListChanged || (dc.RootsV2 != nil && dc.RootsV2.ListChanged)}
		}
		if dc.Sampling != nil {
			caps.Sampling = dc.Sampling
			if dc.Sampling.Tools != nil {
				o.CreateMessageWithToolsHandler = l.sampleWithTools
			} else {
				o.CreateMessageHandler = l.sample
			}
		}
		if dc.Elicitation != nil {
			caps.Elicitation = dc.Elicitation
			o.ElicitationHandler = l.elicit
			o.ElicitationCompleteHandler = func(ctx context.Context, req *mcp.ElicitationCompleteNotificationRequest) {
				if down := l.downstream(); down != nil {
					_ = down.NotifyElicitationComplete(ctx, req.Params)
				}
			}
		}
	}
	c := mcp.NewClient(impl, o)
	c.AddReceivingMiddleware(l.listRoots)
	return c
}

// downstream returns the client session, nil before it initialized.
func (l *mcpLink) downstream() *mcp.ServerSession {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.down
}

// session returns the upstream session, connecting a new one if there is
// none or the last one failed.
func (l *mcpLink) session(ctx context.Context) (*mcp.ClientSession, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.closed:
		return nil, errSessionEnded
	case l.cur != nil && !l.dead:
		return l.cur, nil
	case l.cur != nil:
		_ = l.cur.Close()
	}
	if l.client == nil {
		// A call before notifications/initialized (which the SDK's
		// server refuses, but a client may race): connect as no one.
		l.client = l.newClient(nil)
	}
	t, err := l.p.o.Transport(ctx)
	if err != nil {
		l.cur = nil
		return nil, err
	}
	s, err := l.client.Connect(ctx, t, &mcp.ClientSessionOptions{ProtocolVersion: ProtocolVersion})
	if err != nil {
		l.cur = nil
		return nil, err
	}
	l.cur, l.dead = s, false
	l.connects++
	go func() {
		_ = s.Wait()
		l.failed(s)
	}()
	if l.connects > 1 {
		go l.restore(s, l.level, slices.Sorted(maps.Keys(l.subscribed)))
	}
	return s, nil
}

// restore sets a new upstream session up as the client had set up the
// failed one (its logging level, its subscriptions), and lists the
// upstream again: a restarted child may offer something else.
func (l *mcpLink) restore(s *mcp.ClientSession, level mcp.LoggingLevel, uris []string) {
	ctx := context.Background()
	if level != "" {
		if err := s.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: level}); err != nil {
			l.p.warn("setting the logging level again on a new upstream session", err)
		}
	}
	for _, uri := range uris {
		if err := s.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
			l.p.warn("subscribing again on a new upstream session", err)
		}
	}
	l.relist(true, true, true)
}

// note remembers what the client set up on the upstream session, for
// restore: a level when level is not empty, a subscription to uri when on,
// its end when not.
func (l *mcpLink) note(level mcp.LoggingLevel, uri string, on bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if level != "" {
		l.level = level
		return
	}
	if l.subscribed == nil {
		l.subscribed = map[string]bool{}
	}
	if on {
		l.subscribed[uri] = true
	} else {
		delete(l.subscribed, uri)
	}
}

// failed marks s as failed, if it is still the session in use.
func (l *mcpLink) failed(s *mcp.ClientSession) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur == s {
		l.dead = true
	}
}

// close closes the upstream session for good: the client session ended.
func (l *mcpLink) close() {
	l.mu.Lock()
	s := l.cur
	l.cur, l.dead, l.closed = nil, true, true
	l.mu.Unlock()
	l.p.mu.Lock()
	delete(l.p.links, l)
	l.p.mu.Unlock()
	if s != nil {
		_ = s.Close()
	}
}

// offer puts the kinds of c asked for on the server, in place of what it
// offered of them: tools behind the Guard, the rest forwarded. The SDK's
// server tells its client the lists changed.
func (l *mcpLink) offer(c catalog, tools, prompts, resources bool) {
	tools = tools && l.changed(0, c.tools)
	prompts = prompts && l.changed(1, c.prompts)
	resources = resources && l.changed(2, []any{c.resources, c.templates})
	if tools {
		l.srv.RemoveTools(swap(l, &l.tools, c.tools, func(t *mcp.Tool) string { return t.Name })...)
		for _, t := range c.tools {
			l.srv.AddTool(t, l.p.guarded(t, l.callTool))
		}
	}
	if prompts {
		l.srv.RemovePrompts(swap(l, &l.prompts, c.prompts, func(p *mcp.Prompt) string { return p.Name })...)
		for _, pr := range c.prompts {
			l.srv.AddPrompt(pr, l.getPrompt)
		}
	}
	if resources {
		l.srv.RemoveResources(swap(l, &l.resources, c.resources, func(r *mcp.Resource) string { return r.URI })...)
		l.srv.RemoveResourceTemplates(swap(l, &l.templates, c.templates,
			func(rt *mcp.ResourceTemplate) string { return rt.URITemplate })...)
		for _, r := range c.resources {
			l.srv.AddResource(r, l.readResource)
		}
		for _, rt := range c.templates {
			l.srv.AddResourceTemplate(rt, l.readResource)
		}
	}
}

// changed reports whether the listing of kind i differs from the one last
// offered, and remembers it.
func (l *mcpLink) changed(i int, listing any) bool {
	b, err := json.Marshal(listing)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil && string(b) == l.listed[i] {
		return false
	}
	l.listed[i] = string(b)
	return true
}

// swap sets *names to the names of items and returns the old names not
// among them.
func swap[T any](l *mcpLink, names *[]string, items []T, name func(T) string) []string {
	now := make([]string, 0, len(items))
	for _, it := range items {
		now = append(now, name(it))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var gone []string
	for _, n := range *names {
		if !slices.Contains(now, n) {
			gone = append(gone, n)
		}
	}
	*names = now
	return gone
}

// relist lists the kinds the upstream said changed and offers them anew.
func (l *mcpLink) relist(tools, prompts, resources bool) {
	ctx := context.Background()
	s, err := l.session(ctx)
	if err != nil {
		return
	}
	c, err := list(ctx, s, l.p.caps, tools, prompts, resources)
	if err != nil {
		l.p.warn("re-listing the upstream after a list_changed notification", err)
		return
	}
	l.p.relisted(c, tools, prompts, resources)
	l.offer(c, tools, prompts, resources)
}
