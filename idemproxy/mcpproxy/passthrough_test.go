//lint:file-ignore SA1019 the MCP proxy passes on every feature of the session protocol, the ones the 2026-07-28 protocol deprecates (sampling, roots, logging) included, for the clients and servers that use them

package mcpproxy_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/idemmcp"
	"github.com/idemkit/idem/idemproxy/mcpproxy"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The MCP proxy passes everything but a guarded call's answer through:
// these tests put it between a Go SDK upstream and a Go SDK client and
// check what arrives on each side.

// passUpstream is an upstream server that uses every feature a proxy must
// pass through, and tells the test what it saw.
type passUpstream struct {
	srv                     *mcp.Server
	runs                    atomic.Int64  // runs of "work"
	started                 chan struct{} // "slow" began
	cancelled               chan string   // "slow" or "slow_read" saw its context cancelled
	subscribed, unsubscribe chan string
	rootsChanged            chan struct{}
}

func newPassUpstream() *passUpstream {
	u := &passUpstream{started: make(chan struct{}, 4), cancelled: make(chan string, 4),
		subscribed: make(chan string, 4), unsubscribe: make(chan string, 4), rootsChanged: make(chan struct{}, 4)}
	u.srv = mcp.NewServer(&mcp.Implementation{Name: "passthrough", Version: "2"}, &mcp.ServerOptions{
		SubscribeHandler: func(_ context.Context, req *mcp.SubscribeRequest) error {
			u.subscribed <- req.Params.URI
			return nil
		},
		UnsubscribeHandler: func(_ context.Context, req *mcp.UnsubscribeRequest) error {
			u.unsubscribe <- req.Params.URI
			return nil
		},
		RootsListChangedHandler: func(context.Context, *mcp.RootsListChangedRequest) {
			select { // a handler that blocked would block the session
			case u.rootsChanged <- struct{}{}:
			default:
			}
		},
	})
	// work logs, reports progress, and answers: a write tool (guarded);
	// peek does the same read-only (passed through).
	work := func(name string) mcp.ToolHandlerFor[struct{}, any] {
		return func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			n := u.runs.Add(1)
			_ = req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Logger: "upstream", Data: name + " working"})
			if tok := req.Params.GetProgressToken(); tok != nil {
				_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: 1, Total: 2, Message: name + " half"})
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("%s %d", name, n)}}}, nil, nil
		}
	}
	mcp.AddTool(u.srv, &mcp.Tool{Name: "work"}, work("work"))
	mcp.AddTool(u.srv, &mcp.Tool{Name: "peek", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, work("peek"))
	// slow waits for its call to be cancelled.
	slow := func(name string) mcp.ToolHandlerFor[struct{}, any] {
		return func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			u.started <- struct{}{}
			<-ctx.Done()
			u.cancelled <- name
			return nil, nil, ctx.Err()
		}
	}
	mcp.AddTool(u.srv, &mcp.Tool{Name: "slow"}, slow("slow"))
	mcp.AddTool(u.srv, &mcp.Tool{Name: "slow_read", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, slow("slow_read"))
	// ask asks the client: sampling, elicitation, roots.
	mcp.AddTool(u.srv, &mcp.Tool{Name: "ask", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			msg, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{MaxTokens: 10,
				Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "refund?"}}}})
			if err != nil {
				return nil, nil, fmt.Errorf("sampling: %w", err)
			}
			el, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "sure?", RequestedSchema: map[string]any{
				"type": "object", "properties": map[string]any{"sure": map[string]any{"type": "boolean"}}}})
			if err != nil {
				return nil, nil, fmt.Errorf("elicitation: %w", err)
			}
			roots, err := req.Session.ListRoots(ctx, nil)
			if err != nil {
				return nil, nil, fmt.Errorf("roots: %w", err)
			}
			var uris []string
			for _, r := range roots.Roots {
				uris = append(uris, r.URI)
			}
			text := fmt.Sprintf("sampled %q by %s; elicited %s %v; roots %v", msg.Content.(*mcp.TextContent).Text, msg.Model,
				el.Action, el.Content["sure"], uris)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil, nil
		})
	u.srv.AddResourceTemplate(&mcp.ResourceTemplate{Name: "order", URITemplate: "orders://{id}", MIMEType: "text/plain"},
		func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, MIMEType: "text/plain",
				Text: "the order at " + req.Params.URI}}}, nil
		})
	u.srv.AddResource(&mcp.Resource{Name: "status", URI: "status://refunds", MIMEType: "text/plain"},
		func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, Text: "open"}}}, nil
		})
	return u
}

// passClient is a client session through the proxy, with what it received.
type passClient struct {
	sess        *mcp.ClientSession
	client      *mcp.Client
	logs        chan string
	progress    chan string
	toolsChange chan struct{}
	updated     chan string
}

// newPassProxy serves a proxy in front of up (in memory) and connects a
// client that samples, elicits and has a root.
func newPassProxy(t *testing.T, up *passUpstream) (*mcpproxy.Proxy, *passClient) {
	t.Helper()
	ctx := context.Background()
	p, err := mcpproxy.New(ctx, newStore(t), &mcpproxy.Options{Transport: inMemory(up.srv),
		Guard: idemmcp.Options{SharedScope: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	ct, st := mcp.NewInMemoryTransports()
	if _, err := p.NewServer().Connect(ctx, st, nil); err != nil {
		t.Fatal(err)
	}
	return p, connectPass(t, func(c *mcp.Client) (*mcp.ClientSession, error) { return c.Connect(ctx, ct, nil) })
}

// connectPass connects a client with every handler, through connect.
func connectPass(t *testing.T, connect func(*mcp.Client) (*mcp.ClientSession, error)) *passClient {
	t.Helper()
	pc := &passClient{logs: make(chan string, 16), progress: make(chan string, 16), toolsChange: make(chan struct{}, 16),
		updated: make(chan string, 16)}
	pc.client = mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, &mcp.ClientOptions{
		LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) {
			pc.logs <- fmt.Sprint(req.Params.Level, " ", req.Params.Data)
		},
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			pc.progress <- fmt.Sprint(req.Params.ProgressToken, " ", req.Params.Message)
		},
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { pc.toolsChange <- struct{}{} },
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
			pc.updated <- req.Params.URI
		},
		CreateMessageHandler: func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			return &mcp.CreateMessageResult{Model: "test-model", Role: "assistant", Content: &mcp.TextContent{Text: "yes"}}, nil
		},
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"sure": true}}, nil
		},
	})
	pc.client.AddRoots(&mcp.Root{URI: "file:///work/refunds"})
	sess, err := connect(pc.client)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	pc.sess = sess
	return pc
}

// call calls tool with a progress token and, when key is not empty, a key.
func (pc *passClient) call(t *testing.T, ctx context.Context, tool, key, token string) *mcp.CallToolResult {
	t.Helper()
	meta := mcp.Meta{"progressToken": token}
	if key != "" {
		meta[idemmcp.MetaKey] = key
	}
	res, err := pc.sess.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{}, Meta: meta})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	return res
}

func resultText(res *mcp.CallToolResult) string {
	if res == nil || len(res.Content) == 0 {
		return ""
	}
	if tc, ok := res.Content[0].(*mcp.TextContent); ok {
		return tc.Text
	}
	return ""
}

func TestMCPProxy_LoggingAndProgress(t *testing.T) {
	ctx := context.Background()
	up := newPassUpstream()
	_, pc := newPassProxy(t, up)
	if err := pc.sess.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
		t.Fatal(err)
	}
	// A guarded call's first run and an unguarded call both get the
	// upstream's progress (with the client's own token) and log message;
	// a replay runs nothing and gets none.
	for _, c := range []struct{ tool, key, token string }{{"work", "k-1", "tok-guarded"}, {"peek", "", "tok-passed"}} {
		res := pc.call(t, ctx, c.tool, c.key, c.token)
		if res.IsError || idemmcp.Replayed(res) {
			t.Fatalf("%s: %+v %s", c.tool, res.Meta, resultText(res))
		}
		if got, want := <-pc.progress, c.token+" "+c.tool+" half"; got != want {
			t.Errorf("progress %q, want %q", got, want)
		}
		if got, want := <-pc.logs, "info "+c.tool+" working"; got != want {
			t.Errorf("log %q, want %q", got, want)
		}
	}
	if again := pc.call(t, ctx, "work", "k-1", "tok-again"); !idemmcp.Replayed(again) || resultText(again) != "work 1" {
		t.Fatalf("repeat: %+v %q", again.Meta, resultText(again))
	}
	if up.runs.Load() != 2 {
		t.Fatalf("upstream ran %d times, want 2", up.runs.Load())
	}
	// Above the level the client set, nothing is forwarded: the upstream
	// was told the level, and its message at info is not sent.
	if err := pc.sess.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "error"}); err != nil {
		t.Fatal(err)
	}
	pc.call(t, ctx, "peek", "", "tok-quiet")
	<-pc.progress
	if len(pc.logs) != 0 {
		t.Fatalf("a log message at info reached a client that asked for error: %q", <-pc.logs)
	}
}

func TestMCPProxy_ToolListChanged(t *testing.T) {
	ctx := context.Background()
	up := newPassUpstream()
	p, pc := newPassProxy(t, up)
	mcp.AddTool(up.srv, &mcp.Tool{Name: "late"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprint("late ", up.runs.Add(1))}}}, nil, nil
	})
	names := func() []string {
		var names []string
		for tool, err := range pc.sess.Tools(ctx, nil) {
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, tool.Name)
		}
		return names
	}
	// The client is told, its list has the new tool, which is guarded.
	for !slices.Contains(names(), "late") {
		<-pc.toolsChange
	}
	first, again := pc.call(t, ctx, "late", "k-late", "t1"), pc.call(t, ctx, "late", "k-late", "t2")
	if resultText(first) != "late 1" || resultText(again) != "late 1" || !idemmcp.Replayed(again) {
		t.Fatalf("late twice: %q, %q replayed=%v", resultText(first), resultText(again), idemmcp.Replayed(again))
	}
	if !slices.ContainsFunc(p.Tools(), func(t *mcp.Tool) bool { return t.Name == "late" }) {
		t.Error("the proxy's catalog for new sessions lacks the new tool")
	}
	up.srv.RemoveTools("late")
	for slices.Contains(names(), "late") {
		<-pc.toolsChange
	}
}

func TestMCPProxy_ResourcesTemplatesSubscriptions(t *testing.T) {
	ctx := context.Background()
	up := newPassUpstream()
	_, pc := newPassProxy(t, up)
	caps := pc.sess.InitializeResult().Capabilities
	if caps.Resources == nil || !caps.Resources.Subscribe || caps.Logging == nil {
		t.Fatalf("the proxy's capabilities are not the upstream's: %+v", caps)
	}
	tpls, err := pc.sess.ListResourceTemplates(ctx, nil)
	if err != nil || len(tpls.ResourceTemplates) != 1 || tpls.ResourceTemplates[0].URITemplate != "orders://{id}" {
		t.Fatalf("templates: %v %+v", err, tpls)
	}
	read, err := pc.sess.ReadResource(ctx, &mcp.ReadResourceParams{URI: "orders://o-7"})
	if err != nil || read.Contents[0].Text != "the order at orders://o-7" {
		t.Fatalf("read through a template: %v %+v", err, read)
	}
	if err := pc.sess.Subscribe(ctx, &mcp.SubscribeParams{URI: "status://refunds"}); err != nil {
		t.Fatal(err)
	}
	if got := <-up.subscribed; got != "status://refunds" {
		t.Fatalf("the upstream was subscribed to %q", got)
	}
	if err := up.srv.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: "status://refunds"}); err != nil {
		t.Fatal(err)
	}
	if got := <-pc.updated; got != "status://refunds" {
		t.Fatalf("the client was told %q was updated", got)
	}
	if err := pc.sess.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: "status://refunds"}); err != nil {
		t.Fatal(err)
	}
	if got := <-up.unsubscribe; got != "status://refunds" {
		t.Fatalf("the upstream was unsubscribed from %q", got)
	}
}

func TestMCPProxy_SamplingElicitationRoots(t *testing.T) {
	ctx := context.Background()
	up := newPassUpstream()
	_, pc := newPassProxy(t, up)
	res := pc.call(t, ctx, "ask", "", "t")
	want := `sampled "yes" by test-model; elicited accept true; roots [file:///work/refunds]`
	if res.IsError || resultText(res) != want {
		t.Fatalf("ask: %q, want %q", resultText(res), want)
	}
	// The client's roots change: the upstream is told, and lists them.
	pc.client.AddRoots(&mcp.Root{URI: "file:///work/ledger"})
	<-up.rootsChanged
	res = pc.call(t, ctx, "ask", "", "t")
	if want := `roots [file:///work/ledger file:///work/refunds]`; !strings.Contains(resultText(res), want) {
		t.Fatalf("ask after the roots changed: %q, want %q in it", resultText(res), want)
	}
}

func TestMCPProxy_Cancellation(t *testing.T) {
	ctx := context.Background()
	up := newPassUpstream()
	_, pc := newPassProxy(t, up)
	// An unguarded call cancelled by the client is cancelled upstream.
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := pc.sess.CallTool(cctx, &mcp.CallToolParams{Name: "slow_read", Arguments: map[string]any{}})
		done <- err
	}()
	<-up.started
	cancel()
	if got := <-up.cancelled; got != "slow_read" {
		t.Fatalf("cancelled upstream: %s", got)
	}
	<-done
	// A guarded call cancelled once sent is an unknown outcome: the
	// upstream may have acted, so its key is held, and a retry is told so
	// rather than run.
	cctx, cancel = context.WithCancel(ctx)
	go func() {
		_, err := pc.sess.CallTool(cctx, &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{},
			Meta: mcp.Meta{idemmcp.MetaKey: "k-slow"}})
		done <- err
	}()
	<-up.started
	cancel()
	if got := <-up.cancelled; got != "slow" {
		t.Fatalf("cancelled upstream: %s", got)
	}
	<-done
	for {
		res := pc.call(t, ctx, "slow", "k-slow", "t")
		status := res.Meta[idemmcp.MetaStatus]
		if status == idemmcp.StatusInProgress {
			continue // the cancelled call's outcome is being recorded
		}
		if status != idemmcp.StatusOutcomeUnknown {
			t.Fatalf("retry of a cancelled guarded call: %+v %q", res.Meta, resultText(res))
		}
		break
	}
	if len(up.started) != 0 {
		t.Fatal("the held call ran again")
	}
}

// TestMCPProxy_SessionsOverHTTP serves the proxy over streamable HTTP to
// two clients: each has its own upstream session, so the upstream's
// requests to a client reach that client.
func TestMCPProxy_SessionsOverHTTP(t *testing.T) {
	ctx := context.Background()
	up := newPassUpstream()
	// Closed in the reverse order: the clients, the proxy's server, the
	// proxy's upstream sessions, the upstream (each holds a stream open on
	// the next).
	upSrv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return up.srv }, nil))
	t.Cleanup(upSrv.Close)
	p, err := mcpproxy.New(ctx, newStore(t), &mcpproxy.Options{
		Transport: func(context.Context) (mcp.Transport, error) {
			return &mcp.StreamableClientTransport{Endpoint: upSrv.URL}, nil
		},
		Guard: idemmcp.Options{SharedScope: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	proxySrv := httptest.NewServer(p.Handler(nil))
	t.Cleanup(proxySrv.Close)
	var clients []*passClient
	for i := range 2 {
		pc := connectPass(t, func(c *mcp.Client) (*mcp.ClientSession, error) {
			return c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: proxySrv.URL}, nil)
		})
		pc.client.RemoveRoots("file:///work/refunds")
		pc.client.AddRoots(&mcp.Root{URI: fmt.Sprintf("file:///client/%d", i)})
		clients = append(clients, pc)
	}
	for i, pc := range clients {
		res := pc.call(t, ctx, "ask", "", "t")
		if want := fmt.Sprintf("roots [file:///client/%d]", i); !strings.Contains(resultText(res), want) {
			t.Errorf("client %d: %q, want %q in it", i, resultText(res), want)
		}
	}
}

// TestProxy_UpstreamRestarted ends the upstream session under a client
// that set a logging level and subscribed: the next call connects a new
// one, which is set up again, so the client still gets log messages and
// resource updates.
func TestProxy_UpstreamRestarted(t *testing.T) {
	ctx := context.Background()
	up := newPassUpstream()
	_, pc := newPassProxy(t, up)
	if err := pc.sess.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
		t.Fatal(err)
	}
	if err := pc.sess.Subscribe(ctx, &mcp.SubscribeParams{URI: "status://refunds"}); err != nil {
		t.Fatal(err)
	}
	<-up.subscribed
	for ss := range up.srv.Sessions() {
		_ = ss.Close() // the upstream's end of the proxy's session: as a child that died
		_ = ss.Wait()
	}
	// A call may still find the old session and be told the outcome is
	// unknown (it is unguarded: nothing is held); the next one reconnects.
	for i := 0; ; i++ {
		res := pc.call(t, ctx, "peek", "", "t")
		if !res.IsError {
			break
		}
		if i == 10 {
			t.Fatalf("no new upstream session: %q", resultText(res))
		}
	}
	if got := <-up.subscribed; got != "status://refunds" {
		t.Fatalf("subscribed again to %q", got)
	}
	// The level was set again before the subscription: a call now logs.
	pc.call(t, ctx, "peek", "", "t")
	for got := range pc.logs {
		if got == "info peek working" {
			break
		}
	}
	if err := up.srv.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: "status://refunds"}); err != nil {
		t.Fatal(err)
	}
	if got := <-pc.updated; got != "status://refunds" {
		t.Fatalf("updated: %q", got)
	}
}

func TestProxy_Completion(t *testing.T) {
	ctx := context.Background()
	up := mcp.NewServer(&mcp.Implementation{Name: "completes", Version: "1"}, &mcp.ServerOptions{
		CompletionHandler: func(_ context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
			return &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{Values: []string{req.Params.Argument.Value + "-1042"}}}, nil
		}})
	up.AddPrompt(&mcp.Prompt{Name: "refund", Arguments: []*mcp.PromptArgument{{Name: "order"}}},
		func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user",
				Content: &mcp.TextContent{Text: "refund " + req.Params.Arguments["order"]}}}}, nil
		})
	p, err := mcpproxy.New(ctx, newStore(t), &mcpproxy.Options{Transport: inMemory(up), Guard: idemmcp.Options{SharedScope: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	ct, st := mcp.NewInMemoryTransports()
	if _, err := p.NewServer().Connect(ctx, st, nil); err != nil {
		t.Fatal(err)
	}
	sess, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	got, err := sess.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "refund"},
		Argument: mcp.CompleteParamsArgument{Name: "order", Value: "o"}})
	if err != nil || len(got.Completion.Values) != 1 || got.Completion.Values[0] != "o-1042" {
		t.Fatalf("completion: %v %+v", err, got)
	}
	prompt, err := sess.GetPrompt(ctx, &mcp.GetPromptParams{Name: "refund", Arguments: map[string]string{"order": "o-7"}})
	if err != nil || prompt.Messages[0].Content.(*mcp.TextContent).Text != "refund o-7" {
		t.Fatalf("prompt: %v %+v", err, prompt)
	}
}
