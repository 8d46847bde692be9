package mcpproxy_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/idemmcp"
	"github.com/idemkit/idem/idemproxy/mcpproxy"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// mcpUpstream is an upstream server with three tools that count their
// runs: a write tool, a read-only one, and a read-only one the proxy is
// told to guard.
func mcpUpstream(runs *atomic.Int64) *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "upstream", Version: "3"}, &mcp.ServerOptions{Instructions: "refunds"})
	count := func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		runs.Add(1)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil, nil
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "refund"}, count)
	mcp.AddTool(srv, &mcp.Tool{Name: "lookup", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, count)
	mcp.AddTool(srv, &mcp.Tool{Name: "mislabelled", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, count)
	return srv
}

// inMemory connects the proxy to up over in-memory transports.
func inMemory(up *mcp.Server) func(context.Context) (mcp.Transport, error) {
	return func(ctx context.Context) (mcp.Transport, error) {
		ct, st := mcp.NewInMemoryTransports()
		if _, err := up.Connect(ctx, st, nil); err != nil {
			return nil, err
		}
		return ct, nil
	}
}

func TestNew_GuardsWriteTools(t *testing.T) {
	ctx := context.Background()
	var runs atomic.Int64
	up := mcpUpstream(&runs)
	p, err := mcpproxy.New(ctx, newStore(t), &mcpproxy.Options{
		Transport:  inMemory(up),
		Guard:      idemmcp.Options{SharedScope: true},
		GuardTools: []string{"mislabelled"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ct, st := mcp.NewInMemoryTransports()
	if _, err := p.NewServer().Connect(ctx, st, nil); err != nil {
		t.Fatal(err)
	}
	sess, err := mcp.NewClient(&mcp.Implementation{Name: "agent"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if init := sess.InitializeResult(); init.ServerInfo.Name != "upstream" || init.Instructions != "refunds" {
		t.Fatalf("the proxy introduces itself as %+v, %q", init.ServerInfo, init.Instructions)
	}
	client := &idemmcp.Client{Session: sess}
	call := func(tool, key string) *mcp.CallToolResult {
		t.Helper()
		res, err := client.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{}}, key)
		if err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
		return res
	}
	for _, c := range []struct {
		tool     string
		runs     int64
		replayed bool
	}{{"refund", 1, true}, {"lookup", 2, false}, {"mislabelled", 1, true}} {
		runs.Store(0)
		call(c.tool, "k-"+c.tool)
		again := call(c.tool, "k-"+c.tool)
		if runs.Load() != c.runs || idemmcp.Replayed(again) != c.replayed {
			t.Errorf("%s twice: %d runs, replayed %v; want %d, %v", c.tool, runs.Load(), idemmcp.Replayed(again), c.runs, c.replayed)
		}
	}
	// The listing is the upstream's: the mislabelled tool keeps its hint.
	for tool, err := range sess.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		if tool.Name == "mislabelled" && (tool.Annotations == nil || !tool.Annotations.ReadOnlyHint) {
			t.Errorf("mislabelled lost its annotations: %+v", tool.Annotations)
		}
	}
}

func TestNew_Invalid(t *testing.T) {
	if _, err := mcpproxy.New(context.Background(), newStore(t), &mcpproxy.Options{}); err == nil {
		t.Fatal("no Connect accepted")
	}
}
