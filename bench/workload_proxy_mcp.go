package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"

	"github.com/idemkit/idem/idemmcp"
	"github.com/idemkit/idem/idemproxy/mcpproxy"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// proxyMCPCalls measures idem mcp-proxy's cost as proxyCalls measures idem
// proxy's: a tool call over streamable HTTP on 127.0.0.1 (the Go SDK on
// every side), to an upstream called directly, through the proxy without
// a store (plain forwarding), as a first call (a new key) and as a
// replay, with a lone durable cycle on the proxy's store timed beside
// them. One client session per row, one goroutine.
func (s *Suite) proxyMCPCalls(ctx context.Context) error {
	const id = "proxy-mcp"
	s.addWorkload(Workload{ID: id, Title: "idem mcp-proxy: first call and replay against direct and plain forwarding",
		About: fmt.Sprintf("one call = tools/call of a write tool with a %d-byte JSON argument over streamable HTTP on "+
			"127.0.0.1 (the Go SDK's client and server, one session, one goroutine) to a Go SDK upstream answering a "+
			"%d-byte text: called directly, through mcpproxy.New without a store (plain forwarding), through it on a "+
			"durable store with a new key each call (first call), or replaying one of 100 done keys (replay); store cycle "+
			"is a lone durable claim and completion on the proxy's store, timed beside them", len(requestBody), len(benchResult)),
		Unit: "ns/op", Reference: "proxy first call"})

	store, done, err := s.proxyStore("proxy-mcp-")
	if err != nil {
		return err
	}
	defer done()

	up := mcp.NewServer(&mcp.Implementation{Name: "refunds", Version: "1"}, nil)
	up.AddTool(&mcp.Tool{Name: "refund_order", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(benchResult)}}}, nil
		})
	// Servers close after the sessions that hold streams open on them.
	upSrv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return up }, nil))
	defer upSrv.Close()
	transport := func(context.Context) (mcp.Transport, error) {
		return &mcp.StreamableClientTransport{Endpoint: upSrv.URL}, nil
	}
	plain, err := mcpproxy.New(ctx, nil, &mcpproxy.Options{Transport: transport})
	if err != nil {
		return err
	}
	defer plain.Close()
	guarded, err := mcpproxy.New(ctx, store, &mcpproxy.Options{Transport: transport,
		Guard: idemmcp.Options{SharedScope: true}})
	if err != nil {
		return err
	}
	defer guarded.Close()
	plainSrv, guardedSrv := httptest.NewServer(plain.Handler(nil)), httptest.NewServer(guarded.Handler(nil))
	defer plainSrv.Close()
	defer guardedSrv.Close()

	connect := func(url string) (*mcp.ClientSession, error) {
		return mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).Connect(ctx,
			&mcp.StreamableClientTransport{Endpoint: url}, nil)
	}
	var sessions []*mcp.ClientSession
	defer func() {
		for _, sess := range sessions {
			_ = sess.Close()
		}
	}()
	for _, url := range []string{upSrv.URL, plainSrv.URL, guardedSrv.URL} {
		sess, err := connect(url)
		if err != nil {
			return fmt.Errorf("connecting to %s: %w", url, err)
		}
		sessions = append(sessions, sess)
	}
	direct, plainSess, guardedSess := sessions[0], sessions[1], sessions[2]
	args := map[string]any{"request": requestBody}
	call := func(sess *mcp.ClientSession, key string, replay bool) error {
		params := &mcp.CallToolParams{Name: "refund_order", Arguments: args}
		if key != "" {
			params.Meta = mcp.Meta{idemmcp.MetaKey: key}
		}
		res, err := sess.CallTool(ctx, params)
		if err != nil {
			return err
		}
		if res.IsError || len(res.Content) != 1 || idemmcp.Replayed(res) != replay {
			return fmt.Errorf("refund_order (key %q): error %v, replayed %v, meta %v", key, res.IsError, idemmcp.Replayed(res), res.Meta)
		}
		if tc, ok := res.Content[0].(*mcp.TextContent); !ok || len(tc.Text) != len(benchResult) {
			return fmt.Errorf("refund_order (key %q): content %v", key, res.Content)
		}
		return nil
	}
	const keys = 100
	for i := range keys {
		if err := call(guardedSess, "done-"+strconv.Itoa(i), false); err != nil {
			return err
		}
	}
	first, replay := 0, 0
	names := []string{"proxy first call", "proxy replay", "plain forwarding", "upstream direct", storeCycle}
	fns := []func() error{
		func() error { first++; return call(guardedSess, "new-"+strconv.Itoa(first), false) },
		func() error { replay++; return call(guardedSess, "done-"+strconv.Itoa(replay%keys), true) },
		func() error { return call(plainSess, "k", false) },
		func() error { return call(direct, "k", false) },
		loneCycle(ctx, store),
	}
	return s.microPair(ctx, id, names, fns)
}
