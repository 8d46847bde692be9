package idemmcp_test

import (
	"context"
	"fmt"
	"log"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/badgerstore"
	"github.com/idemkit/idem/idemmcp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// openStore opens an in-memory store for the examples; a server passes a
// directory to idem.Open.
func openStore() *idem.Store {
	mem, err := badgerstore.Open("", badgerstore.Options{InMemory: true}) // the embedded store, in memory
	if err != nil {
		log.Fatal(err)
	}
	store := idem.New(mem, &idem.Options{})
	return store
}

// connectInMemory runs server over the SDK's in-memory transports and
// returns a client session.
func connectInMemory(server *mcp.Server) *mcp.ClientSession {
	ct, st := mcp.NewInMemoryTransports()
	if _, err := server.Connect(context.Background(), st, nil); err != nil {
		log.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "v1"}, nil).Connect(context.Background(), ct, nil)
	if err != nil {
		log.Fatal(err)
	}
	return cs
}

type Refund struct {
	OrderID     string `json:"order_id"`
	AmountCents int    `json:"amount_cents"`
}

type Receipt struct {
	RefundID string `json:"refund_id"`
}

// A typed tool protected by a Guard: the same key twice, one refund.
func ExampleAddTool() {
	store := openStore()
	defer store.Close()
	guard := idemmcp.New(store, &idemmcp.Options{SharedScope: true}) // one local client: a stdio server

	server := mcp.NewServer(&mcp.Implementation{Name: "refunds", Version: "v1"}, nil)
	refunds := 0
	idemmcp.AddTool(guard, server, &mcp.Tool{Name: "refund_order"},
		func(_ context.Context, _ *mcp.CallToolRequest, in Refund) (*mcp.CallToolResult, Receipt, error) {
			refunds++
			return nil, Receipt{RefundID: fmt.Sprintf("re_%d", refunds)}, nil
		})

	cs := connectInMemory(server)
	defer cs.Close()
	for range 2 {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "refund_order",
			Arguments: Refund{OrderID: "o-1", AmountCents: 1250},
			Meta:      mcp.Meta{"idempotencyKey": "refund:o-1"}})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%v replayed=%t\n", res.StructuredContent, idemmcp.Replayed(res))
	}
	fmt.Println("refunds executed:", refunds)
	// Output:
	// map[refund_id:re_1] replayed=false
	// map[refund_id:re_1] replayed=true
	// refunds executed: 1
}

// The middleware protects every write tool of a server, however it was
// added, and refuses a write call without a key with a tool error the
// model can act on; read-only tools pass.
func ExampleGuard_Middleware() {
	store := openStore()
	defer store.Close()
	guard := idemmcp.New(store, &idemmcp.Options{SharedScope: true})

	server := mcp.NewServer(&mcp.Implementation{Name: "orders", Version: "v1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "cancel_order"},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "cancelled"}}}, nil, nil
		})
	mcp.AddTool(server, &mcp.Tool{Name: "get_order", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "open"}}}, nil, nil
		})
	server.AddReceivingMiddleware(guard.Middleware())

	cs := connectInMemory(server)
	defer cs.Close()
	_, advertised := cs.InitializeResult().Capabilities.Experimental[idemmcp.Capability]
	fmt.Println("capability advertised:", advertised)
	for _, name := range []string{"cancel_order", "get_order"} {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s without a key: isError=%t status=%q\n", name, res.IsError, idemmcp.Status(res))
	}
	// Output:
	// capability advertised: true
	// cancel_order without a key: isError=true status="missing_key"
	// get_order without a key: isError=false status=""
}

// A raw handler wrapped by hand; the tool is registered as Describe says,
// so that clients learn to send keys.
func ExampleGuard_Handler() {
	store := openStore()
	defer store.Close()
	guard := idemmcp.New(store, &idemmcp.Options{SharedScope: true, KeyArgument: "idempotency_key"})

	tool := &mcp.Tool{Name: "send_email", InputSchema: map[string]any{"type": "object"}}
	sent := 0
	server := mcp.NewServer(&mcp.Implementation{Name: "mail", Version: "v1"}, nil)
	server.AddTool(guard.Describe(tool), guard.Handler(tool,
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			sent++
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "sent"}}}, nil
		}))

	cs := connectInMemory(server)
	defer cs.Close()
	// A model that cannot set _meta passes the key as an argument.
	args := map[string]any{"to": "ops@example.com", "idempotency_key": "mail-42"}
	for range 2 {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "send_email", Arguments: args})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("replayed=%t\n", idemmcp.Replayed(res))
	}
	fmt.Println("emails sent:", sent)
	// Output:
	// replayed=false
	// replayed=true
	// emails sent: 1
}

// The agent side: the key is derived once for the planned effect and sent
// on every attempt; the Client retries with it.
func ExampleClient_CallTool() {
	store := openStore()
	defer store.Close()
	server := mcp.NewServer(&mcp.Implementation{Name: "refunds", Version: "v1"}, nil)
	idemmcp.AddTool(idemmcp.New(store, &idemmcp.Options{SharedScope: true}), server, &mcp.Tool{Name: "refund_order"},
		func(_ context.Context, _ *mcp.CallToolRequest, in Refund) (*mcp.CallToolResult, Receipt, error) {
			return nil, Receipt{RefundID: "re_" + in.OrderID}, nil
		})

	client := &idemmcp.Client{Session: connectInMemory(server)}
	defer client.Session.Close()
	key := idem.KeyDeriver{}.Effect("run-7", "refund:o-1") // the same for every attempt of this run
	for range 2 {
		res, err := client.CallTool(context.Background(), &mcp.CallToolParams{Name: "refund_order",
			Arguments: Refund{OrderID: "o-1", AmountCents: 1250}}, key)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%v replayed=%t\n", res.StructuredContent, idemmcp.Replayed(res))
	}
	// Output:
	// map[refund_id:re_o-1] replayed=false
	// map[refund_id:re_o-1] replayed=true
}

// A step planned with a Journal is called with the key and arguments saved
// when it was first planned, whatever the model regenerates later.
func ExampleClient_CallStep() {
	store := openStore()
	defer store.Close()
	server := mcp.NewServer(&mcp.Implementation{Name: "refunds", Version: "v1"}, nil)
	idemmcp.AddTool(idemmcp.New(store, &idemmcp.Options{SharedScope: true}), server, &mcp.Tool{Name: "refund_order"},
		func(_ context.Context, _ *mcp.CallToolRequest, in Refund) (*mcp.CallToolResult, Receipt, error) {
			return nil, Receipt{RefundID: fmt.Sprintf("re_%s_%d", in.OrderID, in.AmountCents)}, nil
		})
	client := &idemmcp.Client{Session: connectInMemory(server)}
	defer client.Session.Close()

	journal := idem.NewJournal(store, nil)
	for _, args := range []string{`{"order_id":"o-1","amount_cents":1250}`, `{"order_id":"o-1","amount_cents":1300}`} {
		step, err := journal.Plan(context.Background(), "run-7", 3, "refund_order", []byte(args))
		if err != nil {
			log.Fatal(err)
		}
		res, err := client.CallStep(context.Background(), step)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%v replayed=%t\n", res.StructuredContent, idemmcp.Replayed(res))
	}
	// Output:
	// map[refund_id:re_o-1_1250] replayed=false
	// map[refund_id:re_o-1_1250] replayed=true
}
