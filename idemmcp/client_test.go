package idemmcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemmcp"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestClient_RetriesInProgress(t *testing.T) {
	r := &refunds{started: make(chan struct{}, 1), gate: make(chan struct{})}
	s := newServer(shared(t, nil), r)
	first := make(chan *mcp.CallToolResult, 1)
	go func() { first <- call(t, connect(t, s, ""), "k", "o-1", 5) }()
	<-r.started

	clock := newStepClock()
	clock.onWait = func(n int) {
		if n == 1 { // the first attempt was told "in progress": let the first call finish
			close(r.gate)
			<-first
		}
	}
	c := &idemmcp.Client{Session: connect(t, s, ""), Clock: clock}
	res, err := c.CallTool(context.Background(), &mcp.CallToolParams{Name: "refund_order",
		Arguments: map[string]any{"order_id": "o-1", "amount_cents": 5}}, "k")
	if err != nil || !idemmcp.Replayed(res) || r.count() != 1 {
		t.Fatalf("err=%v replayed=%t runs=%d", err, idemmcp.Replayed(res), r.count())
	}
	if w := clock.Waits(); len(w) != 1 || w[0] != time.Second {
		t.Fatalf("waits %v, want the server's one second", w)
	}
}

func TestClient_GivesUp(t *testing.T) {
	r := &refunds{started: make(chan struct{}, 1), gate: make(chan struct{})}
	s := newServer(shared(t, nil), r)
	first := make(chan *mcp.CallToolResult, 1)
	go func() { first <- call(t, connect(t, s, ""), "k", "o-1", 5) }()
	<-r.started
	defer func() { close(r.gate); <-first }()

	c := &idemmcp.Client{Session: connect(t, s, ""), Clock: newStepClock(), MaxAttempts: 3}
	_, err := c.CallTool(context.Background(), &mcp.CallToolParams{Name: "refund_order",
		Arguments: map[string]any{"order_id": "o-1", "amount_cents": 5}}, "k")
	var re *idemmcp.RetryError
	if !errors.As(err, &re) || re.Attempts != 3 || re.Reason != "attempts" || re.Status != idemmcp.StatusInProgress || re.Key != "k" {
		t.Fatalf("err = %v (%+v)", err, re)
	}
}

func TestClient_ProtocolErrorNotRetried(t *testing.T) {
	clock := newStepClock()
	c := &idemmcp.Client{Session: connect(t, newServer(shared(t, nil), &refunds{}), ""), Clock: clock}
	_, err := c.CallTool(context.Background(), &mcp.CallToolParams{Name: "no_such_tool"}, "k")
	var wire *jsonrpc.Error
	if !errors.As(err, &wire) || len(clock.Waits()) != 0 {
		t.Fatalf("err = %v after %d waits, want the server's protocol error at once", err, len(clock.Waits()))
	}
}

// TestClient_ReconnectsAfterLostResponse drops the connection in place of
// the first tools/call response, after the tool ran: the Client connects a
// new session and its retry with the same key replays.
func TestClient_ReconnectsAfterLostResponse(t *testing.T) {
	r := &refunds{}
	s := newServer(shared(t, nil), r)
	var connects atomic.Int32
	var dropped atomic.Bool
	c := &idemmcp.Client{Clock: newStepClock(), Connect: func(ctx context.Context) (*mcp.ClientSession, error) {
		connects.Add(1)
		ct, st := mcp.NewInMemoryTransports()
		ss, err := s.Connect(ctx, dropTransport{st, &dropped}, nil)
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { _ = ss.Close() })
		return mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "v0"}, nil).Connect(ctx, ct, nil)
	}}
	res, err := c.CallTool(context.Background(), &mcp.CallToolParams{Name: "refund_order",
		Arguments: map[string]any{"order_id": "o-1", "amount_cents": 5}}, idem.KeyDeriver{}.Step("run-1", 3, "refund_order"))
	if err != nil {
		t.Fatal(err)
	}
	if !dropped.Load() || !idemmcp.Replayed(res) || refundOf(t, res).RefundID != "re_1" || r.count() != 1 || connects.Load() != 2 {
		t.Fatalf("dropped=%t replayed=%t runs=%d connects=%d", dropped.Load(), idemmcp.Replayed(res), r.count(), connects.Load())
	}
}

// dropTransport closes the connection instead of writing the first
// tools/call response, once per flag.
type dropTransport struct {
	mcp.Transport
	dropped *atomic.Bool
}

func (d dropTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := d.Transport.Connect(ctx)
	return &dropConn{Connection: c, dropped: d.dropped}, err
}

type dropConn struct {
	mcp.Connection
	dropped *atomic.Bool
	mu      sync.Mutex
	calls   map[jsonrpc.ID]bool // ids of tools/call requests read
}

func (c *dropConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	m, err := c.Connection.Read(ctx)
	if r, ok := m.(*jsonrpc.Request); ok && r.Method == "tools/call" {
		c.mu.Lock()
		if c.calls == nil {
			c.calls = map[jsonrpc.ID]bool{}
		}
		c.calls[r.ID] = true
		c.mu.Unlock()
	}
	return m, err
}

func (c *dropConn) Write(ctx context.Context, m jsonrpc.Message) error {
	if r, ok := m.(*jsonrpc.Response); ok {
		c.mu.Lock()
		isCall := c.calls[r.ID]
		c.mu.Unlock()
		if isCall && c.dropped.CompareAndSwap(false, true) {
			_ = c.Connection.Close()
			return errors.New("response dropped")
		}
	}
	return c.Connection.Write(ctx, m)
}

func TestClient_CallStep(t *testing.T) {
	store := newStore(t, nil)
	r := &refunds{}
	c := &idemmcp.Client{Session: connect(t, newServer(idemmcp.New(store, &idemmcp.Options{SharedScope: true}), r), "")}
	j := idem.NewJournal(store, nil)
	ctx := context.Background()
	var results []*mcp.CallToolResult
	for _, args := range []string{`{"order_id":"o-1","amount_cents":5}`, `{"order_id":"o-1","amount_cents":6}`} {
		// The model regenerates the step with another amount: the journal
		// hands back the first plan, key and arguments both.
		step, err := j.Plan(ctx, "run-1", 4, "refund_order", []byte(args))
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.CallStep(ctx, step)
		if err != nil {
			t.Fatal(err)
		}
		results = append(results, res)
	}
	if !idemmcp.Replayed(results[1]) || refundOf(t, results[1]).AmountCents != 5 || r.count() != 1 {
		t.Fatalf("replayed=%t amount=%d runs=%d", idemmcp.Replayed(results[1]), refundOf(t, results[1]).AmountCents, r.count())
	}
}

// TestTopLevelKeys sends the key in the SEP-3182 shape, as params.idempotencyKey.
func TestTopLevelKeys(t *testing.T) {
	for _, lift := range []bool{false, true} {
		r := &refunds{}
		s := newServer(shared(t, nil), r)
		ct, st := mcp.NewInMemoryTransports()
		var server mcp.Transport = st
		if lift {
			server = idemmcp.TopLevelKeys(st)
		}
		ss, err := s.Connect(context.Background(), server, nil)
		if err != nil {
			t.Fatal(err)
		}
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "sep3182", Version: "v0"}, nil).Connect(context.Background(), topLevelTransport{ct}, nil)
		if err != nil {
			t.Fatal(err)
		}
		call(t, cs, "top-key", "o-1", 5)
		res := call(t, cs, "top-key", "o-1", 5)
		_ = cs.Close()
		_ = ss.Wait()
		switch {
		case lift && (!idemmcp.Replayed(res) || r.count() != 1):
			t.Fatalf("lifted: replayed=%t runs=%d", idemmcp.Replayed(res), r.count())
		case !lift && idemmcp.Status(res) != idemmcp.StatusMissingKey:
			t.Fatalf("the client did not send the key at the top level (status %q)", idemmcp.Status(res))
		}
	}
}

// topLevelTransport moves _meta.idempotencyKey of each tools/call it
// writes to params.idempotencyKey, as a SEP-3182 client sends it.
type topLevelTransport struct{ mcp.Transport }

func (t topLevelTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	return topLevelConn{c}, err
}

type topLevelConn struct{ mcp.Connection }

func (c topLevelConn) Write(ctx context.Context, m jsonrpc.Message) error {
	if r, ok := m.(*jsonrpc.Request); ok && r.Method == "tools/call" {
		var p map[string]any
		if err := json.Unmarshal(r.Params, &p); err != nil {
			return err
		}
		if meta, ok := p["_meta"].(map[string]any); ok {
			if key, ok := meta[idemmcp.MetaKey]; ok {
				delete(meta, idemmcp.MetaKey)
				p[idemmcp.MetaKey] = key
			}
		}
		b, err := json.Marshal(p)
		if err != nil {
			return err
		}
		cp := *r
		cp.Params = b
		m = &cp
	}
	return c.Connection.Write(ctx, m)
}

// TestClient_RetriesTakenOver: a transactional call that was taken over
// rolled back; the retry gets the other call's outcome.
func TestClient_RetriesTakenOver(t *testing.T) {
	s := mcp.NewServer(&mcp.Implementation{Name: "taken-over", Version: "v0"}, nil)
	var calls atomic.Int32
	s.AddTool(&mcp.Tool{Name: "refund_order", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if calls.Add(1) == 1 {
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "taken over"}},
					Meta: mcp.Meta{idemmcp.MetaStatus: idemmcp.StatusTakenOver, idemmcp.MetaRetryAfter: 1}}, nil
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "refunded"}}}, nil
		})
	c := &idemmcp.Client{Session: connect(t, s, ""), Clock: newStepClock()}
	res, err := c.CallTool(context.Background(), &mcp.CallToolParams{Name: "refund_order"}, "k")
	if err != nil || res.IsError || calls.Load() != 2 {
		t.Fatalf("err=%v res=%+v calls=%d", err, res, calls.Load())
	}
}
