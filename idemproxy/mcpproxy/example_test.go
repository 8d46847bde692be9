package mcpproxy_test

import (
	"context"
	"fmt"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/badgerstore"
	"github.com/idemkit/idem/idemmcp"
	"github.com/idemkit/idem/idemproxy"
	"github.com/idemkit/idem/idemproxy/mcpproxy"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func ExampleNew() {
	ctx := context.Background()
	// The upstream: an MCP server with a write tool and no idempotency of
	// its own (here in memory; in earnest a child over stdio or a
	// streamable HTTP endpoint).
	runs := 0
	upstream := mcp.NewServer(&mcp.Implementation{Name: "refunds", Version: "1"}, nil)
	upstream.AddTool(&mcp.Tool{Name: "refund_order", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			runs++
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprint("refund ", runs)}}}, nil
		})

	mem, _ := badgerstore.Open("", badgerstore.Options{InMemory: true})
	store := idem.New(mem, &idem.Options{Policy: idemproxy.Policy, Resolver: idemproxy.HoldResolver{}})
	defer store.Close()
	p, err := mcpproxy.New(ctx, store, &mcpproxy.Options{
		Transport: func(ctx context.Context) (mcp.Transport, error) {
			ct, st := mcp.NewInMemoryTransports()
			_, err := upstream.Connect(ctx, st, nil)
			return ct, err
		},
		Guard: idemmcp.Options{SharedScope: true},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()

	// A client of the proxy sees the upstream's server.
	ct, st := mcp.NewInMemoryTransports()
	if _, err := p.NewServer().Connect(ctx, st, nil); err != nil {
		fmt.Println(err)
		return
	}
	sess, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sess.Close()
	fmt.Println("server:", sess.InitializeResult().ServerInfo.Name)
	for range 2 {
		res, err := (&idemmcp.Client{Session: sess}).CallTool(ctx,
			&mcp.CallToolParams{Name: "refund_order", Arguments: map[string]any{"order": "o-1"}}, "refund:o-1")
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%s replayed=%v\n", res.Content[0].(*mcp.TextContent).Text, idemmcp.Replayed(res))
	}
	// Output:
	// server: refunds
	// refund 1 replayed=false
	// refund 1 replayed=true
}
