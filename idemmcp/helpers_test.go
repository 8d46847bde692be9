package idemmcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/badgerstore"
	"github.com/idemkit/idem/idemmcp"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// newStore opens an in-memory store without a background sweep and closes
// it when the test ends.
func newStore(t testing.TB, o *idem.Options) *idem.Store {
	t.Helper()
	var opts idem.Options
	if o != nil {
		opts = *o
	}
	if opts.SweepInterval == 0 {
		opts.SweepInterval = -1
	}
	mem, err := badgerstore.Open("", badgerstore.Options{InMemory: true})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	s := idem.New(mem, &opts)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

type refundIn struct {
	OrderID     string `json:"order_id"`
	AmountCents int    `json:"amount_cents"`
	// Key is the optional key argument, for Options.KeyArgument.
	Key string `json:"idempotency_key,omitempty"`
}

type refundOut struct {
	RefundID    string `json:"refund_id"`
	OrderID     string `json:"order_id"`
	AmountCents int    `json:"amount_cents"`
}

// refunds is a refund tool that counts its executions. If gate is set,
// each execution tells started and waits for gate to close.
type refunds struct {
	mu      sync.Mutex
	runs    int
	started chan struct{}
	gate    chan struct{}
	fail    bool // answer with a tool error
}

func (r *refunds) handle(ctx context.Context, _ *mcp.CallToolRequest, in refundIn) (*mcp.CallToolResult, refundOut, error) {
	r.mu.Lock()
	r.runs++
	n := r.runs
	r.mu.Unlock()
	if r.started != nil {
		r.started <- struct{}{}
	}
	if r.gate != nil {
		<-r.gate
	}
	if r.fail {
		return nil, refundOut{}, fmt.Errorf("order %s cannot be refunded (run %d)", in.OrderID, n)
	}
	return nil, refundOut{RefundID: fmt.Sprintf("re_%d", n), OrderID: in.OrderID, AmountCents: in.AmountCents}, nil
}

func (r *refunds) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runs
}

var refundTool = &mcp.Tool{Name: "refund_order", Description: "Refund an order."}

var listTool = &mcp.Tool{Name: "list_refunds", Description: "List refunds.",
	Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}

// newServer returns a server with refund_order protected by g (through
// idemmcp.AddTool) and list_refunds read-only.
func newServer(g *idemmcp.Guard, r *refunds) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "refunds", Version: "v0"}, nil)
	idemmcp.AddTool(g, s, refundTool, r.handle)
	mcp.AddTool(s, listTool, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, struct {
		Runs int `json:"runs"`
	}, error) {
		return nil, struct {
			Runs int `json:"runs"`
		}{r.count()}, nil
	})
	return s
}

// connect runs s over the SDK's in-memory transports and returns a client
// session, closed when the test ends. A non-empty principal is stamped on
// every request as the auth info's UserID, as an authenticating HTTP
// transport would.
func connect(t testing.TB, s *mcp.Server, principal string) *mcp.ClientSession {
	t.Helper()
	ct, st := mcp.NewInMemoryTransports()
	var server mcp.Transport = st
	if principal != "" {
		server = authTransport{st, principal}
	}
	ctx := context.Background()
	ss, err := s.Connect(ctx, server, nil)
	if err != nil {
		t.Fatalf("server connect: %v", err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatalf("client connect: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close(); _ = ss.Wait() })
	return cs
}

// authTransport stamps a principal on every request it reads.
type authTransport struct {
	mcp.Transport
	user string
}

func (a authTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := a.Transport.Connect(ctx)
	return authConn{c, a.user}, err
}

type authConn struct {
	mcp.Connection
	user string
}

func (c authConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	m, err := c.Connection.Read(ctx)
	if r, ok := m.(*jsonrpc.Request); ok {
		r.Extra = &mcp.RequestExtra{TokenInfo: &auth.TokenInfo{UserID: c.user, Expiration: time.Now().Add(time.Hour)}}
	}
	return m, err
}

// call calls refund_order with key in _meta ("" sends none).
func call(t testing.TB, cs *mcp.ClientSession, key, order string, amount int) *mcp.CallToolResult {
	t.Helper()
	p := &mcp.CallToolParams{Name: "refund_order", Arguments: map[string]any{"order_id": order, "amount_cents": amount}}
	if key != "" {
		p = idemmcp.WithKey(p, key)
	}
	res, err := cs.CallTool(context.Background(), p)
	if err != nil {
		t.Fatalf("call refund_order: %v", err)
	}
	return res
}

// refundOf decodes a result's structured content.
func refundOf(t testing.TB, res *mcp.CallToolResult) refundOut {
	t.Helper()
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	var out refundOut
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("structured content %s: %v", b, err)
	}
	return out
}

// textOf returns a result's first text content.
func textOf(res *mcp.CallToolResult) string {
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			return tc.Text
		}
	}
	return ""
}

// stepClock is an idem.Clock for the Client: every After fires at once,
// moving the time on by d, and is recorded; onWait, if set, runs first.
type stepClock struct {
	mu     sync.Mutex
	now    time.Time
	waits  []time.Duration
	onWait func(n int)
}

func newStepClock() *stepClock {
	return &stepClock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.waits = append(c.waits, d)
	n, hook, now := len(c.waits), c.onWait, c.now
	c.mu.Unlock()
	if hook != nil {
		hook(n)
	}
	ch := make(chan time.Time, 1)
	ch <- now
	return ch
}

func (c *stepClock) Waits() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.waits...)
}
