package idemmcp_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/idemmcp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func shared(t testing.TB, o *idem.Options) *idemmcp.Guard {
	return idemmcp.New(newStore(t, o), &idemmcp.Options{SharedScope: true})
}

func TestAddTool_FirstRunsRetryReplays(t *testing.T) {
	r := &refunds{}
	cs := connect(t, newServer(shared(t, nil), r), "")

	first := call(t, cs, "refund:o-1", "o-1", 1250)
	if first.IsError || idemmcp.Replayed(first) {
		t.Fatalf("first call: isError=%t replayed=%t %q", first.IsError, idemmcp.Replayed(first), textOf(first))
	}
	second := call(t, cs, "refund:o-1", "o-1", 1250)
	if !idemmcp.Replayed(second) || second.IsError {
		t.Fatalf("second call: replayed=%t isError=%t meta=%v", idemmcp.Replayed(second), second.IsError, second.Meta)
	}
	if got, want := refundOf(t, second), (refundOut{"re_1", "o-1", 1250}); got != want {
		t.Fatalf("replayed structured content %+v, want %+v", got, want)
	}
	if textOf(second) != textOf(first) {
		t.Fatalf("replayed text %q, first %q", textOf(second), textOf(first))
	}
	if r.count() != 1 {
		t.Fatalf("refund ran %d times, want 1", r.count())
	}
}

func TestAddTool_NewSessionReplays(t *testing.T) {
	r := &refunds{}
	s := newServer(shared(t, nil), r)
	call(t, connect(t, s, "alice"), "k-1", "o-1", 100)
	// A client that reconnects gets a new session; its retry must replay.
	res := call(t, connect(t, s, "alice"), "k-1", "o-1", 100)
	if !idemmcp.Replayed(res) || r.count() != 1 {
		t.Fatalf("retry over a new session: replayed=%t runs=%d", idemmcp.Replayed(res), r.count())
	}
}

func TestAddTool_ChangedArgumentsRefused(t *testing.T) {
	r := &refunds{}
	cs := connect(t, newServer(shared(t, nil), r), "")
	call(t, cs, "refund:o-1", "o-1", 1250)
	res := call(t, cs, "refund:o-1", "o-1", 9999)
	if !res.IsError || idemmcp.Status(res) != idemmcp.StatusMismatch {
		t.Fatalf("changed amount: isError=%t status=%q", res.IsError, idemmcp.Status(res))
	}
	if !strings.Contains(textOf(res), `"refund:o-1"`) {
		t.Fatalf("mismatch text does not name the key: %q", textOf(res))
	}
	if r.count() != 1 {
		t.Fatalf("refund ran %d times, want 1", r.count())
	}
}

func TestAddTool_ConcurrentDuplicates(t *testing.T) {
	r := &refunds{started: make(chan struct{}, 1), gate: make(chan struct{})}
	cs := connect(t, newServer(shared(t, nil), r), "")
	first := make(chan *mcp.CallToolResult)
	go func() { first <- call(t, cs, "k", "o-1", 5) }()
	<-r.started

	const n = 8
	answers := make([]*mcp.CallToolResult, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { answers[i] = call(t, cs, "k", "o-1", 5) })
	}
	wg.Wait()
	for i, res := range answers {
		if !res.IsError || idemmcp.Status(res) != idemmcp.StatusInProgress {
			t.Fatalf("duplicate %d: isError=%t status=%q", i, res.IsError, idemmcp.Status(res))
		}
		if s, _ := res.Meta[idemmcp.MetaRetryAfter].(float64); s < 1 {
			t.Fatalf("duplicate %d: retryAfterSeconds %v", i, res.Meta[idemmcp.MetaRetryAfter])
		}
		if !strings.Contains(textOf(res), "retry with the same key") {
			t.Fatalf("duplicate %d: text %q", i, textOf(res))
		}
	}
	close(r.gate)
	if res := <-first; res.IsError {
		t.Fatalf("first call: %q", textOf(res))
	}
	if res := call(t, cs, "k", "o-1", 5); !idemmcp.Replayed(res) {
		t.Fatalf("retry after the first finished was not replayed")
	}
	if r.count() != 1 {
		t.Fatalf("refund ran %d times, want 1", r.count())
	}
}

func TestAddTool_MissingKey(t *testing.T) {
	r := &refunds{}
	cs := connect(t, newServer(shared(t, nil), r), "")
	res := call(t, cs, "", "o-1", 5)
	if !res.IsError || idemmcp.Status(res) != idemmcp.StatusMissingKey ||
		!strings.Contains(textOf(res), "params._meta.idempotencyKey") {
		t.Fatalf("missing key: isError=%t status=%q text=%q", res.IsError, idemmcp.Status(res), textOf(res))
	}
	if r.count() != 0 {
		t.Fatalf("refund ran without a key")
	}

	// With AllowMissingKey the call runs unprotected, every time.
	g := idemmcp.New(newStore(t, nil), &idemmcp.Options{SharedScope: true, AllowMissingKey: true})
	cs = connect(t, newServer(g, r), "")
	call(t, cs, "", "o-1", 5)
	if res := call(t, cs, "", "o-1", 5); res.IsError || idemmcp.Replayed(res) || r.count() != 2 {
		t.Fatalf("unprotected: isError=%t replayed=%t runs=%d", res.IsError, idemmcp.Replayed(res), r.count())
	}
}

func TestAddTool_InvalidKey(t *testing.T) {
	r := &refunds{}
	cs := connect(t, newServer(shared(t, nil), r), "")
	for _, key := range []any{strings.Repeat("k", backend.MaxKeyLen+1), "caf\u00e9", 42} {
		p := &mcp.CallToolParams{Name: "refund_order", Arguments: map[string]any{"order_id": "o", "amount_cents": 1},
			Meta: mcp.Meta{idemmcp.MetaKey: key}}
		res, err := cs.CallTool(context.Background(), p)
		if err != nil || idemmcp.Status(res) != idemmcp.StatusInvalidKey {
			t.Fatalf("key %v: err=%v status=%q", key, err, idemmcp.Status(res))
		}
	}
	if r.count() != 0 {
		t.Fatalf("refund ran with an invalid key")
	}
}

func TestAddTool_ReadOnlyPassesThrough(t *testing.T) {
	r := &refunds{}
	cs := connect(t, newServer(shared(t, nil), r), "")
	for range 2 {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "list_refunds"})
		if err != nil || res.IsError || idemmcp.Replayed(res) {
			t.Fatalf("list_refunds without a key: err=%v isError=%t replayed=%t", err, res.IsError, idemmcp.Replayed(res))
		}
	}
}

func TestGuard_PrincipalsIsolated(t *testing.T) {
	r := &refunds{}
	g := idemmcp.New(newStore(t, nil), &idemmcp.Options{Authenticated: true})
	s := newServer(g, r)
	alice, bob := connect(t, s, "alice"), connect(t, s, "bob")
	a := call(t, alice, "same-key", "o-1", 5)
	b := call(t, bob, "same-key", "o-1", 5)
	if idemmcp.Replayed(b) || refundOf(t, a).RefundID == refundOf(t, b).RefundID || r.count() != 2 {
		t.Fatalf("bob got alice's record: replayed=%t runs=%d", idemmcp.Replayed(b), r.count())
	}
	// The same key with other arguments is no mismatch for another principal.
	if res := call(t, connect(t, s, "carol"), "same-key", "o-9", 7); res.IsError {
		t.Fatalf("carol: %q", textOf(res))
	}
	// A call without a principal is refused when the server said calls are
	// authenticated.
	res := call(t, connect(t, s, ""), "same-key", "o-1", 5)
	if idemmcp.Status(res) != idemmcp.StatusUnauthenticated || r.count() != 3 {
		t.Fatalf("no principal: status=%q runs=%d", idemmcp.Status(res), r.count())
	}
}

func TestGuard_ScopeFunction(t *testing.T) {
	r := &refunds{}
	// The server says every caller of one tenant shares records.
	g := idemmcp.New(newStore(t, nil), &idemmcp.Options{Scope: func(context.Context, *mcp.CallToolRequest) (string, error) {
		return "tenant-1", nil
	}})
	s := newServer(g, r)
	call(t, connect(t, s, "alice"), "k", "o-1", 5)
	if res := call(t, connect(t, s, "bob"), "k", "o-1", 5); !idemmcp.Replayed(res) || r.count() != 1 {
		t.Fatalf("shared tenant scope: replayed=%t runs=%d", idemmcp.Replayed(res), r.count())
	}
}

func TestNew_RefusesWithoutScope(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("New built a guard without being told how to scope calls")
		}
	}()
	idemmcp.New(newStore(t, nil), nil)
}

func TestHandler_PanicReleases(t *testing.T) {
	g := idemmcp.New(newStore(t, nil), &idemmcp.Options{SharedScope: true})
	runs := 0
	h := g.Handler(refundTool, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		runs++
		if runs == 1 {
			panic("downstream blew up")
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "refunded"}}}, nil
	})
	req := &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: "refund_order", Meta: mcp.Meta{idemmcp.MetaKey: "k"},
		Arguments: []byte(`{"order_id":"o-1"}`)}}
	func() {
		defer func() {
			if p := recover(); p != "downstream blew up" {
				t.Fatalf("panic not re-raised: %v", p)
			}
		}()
		_, _ = h(context.Background(), req)
	}()
	res, err := h(context.Background(), req)
	if err != nil || res.IsError || idemmcp.Replayed(res) || runs != 2 {
		t.Fatalf("retry after a panic: err=%v isError=%t replayed=%t runs=%d", err, res.IsError, idemmcp.Replayed(res), runs)
	}
}

func TestAddTool_ToolErrors(t *testing.T) {
	// Under the default policy a tool error is released: a retry runs.
	r := &refunds{fail: true}
	cs := connect(t, newServer(shared(t, nil), r), "")
	call(t, cs, "k", "o-1", 5)
	if res := call(t, cs, "k", "o-1", 5); !res.IsError || idemmcp.Replayed(res) || r.count() != 2 {
		t.Fatalf("default policy: isError=%t replayed=%t runs=%d", res.IsError, idemmcp.Replayed(res), r.count())
	}
	// Under ToolErrorPolicy it is saved and replayed, isError included.
	r = &refunds{fail: true}
	cs = connect(t, newServer(shared(t, &idem.Options{Policy: idemmcp.ToolErrorPolicy}), r), "")
	first := call(t, cs, "k", "o-1", 5)
	res := call(t, cs, "k", "o-1", 5)
	if !res.IsError || !idemmcp.Replayed(res) || textOf(res) != textOf(first) || r.count() != 1 {
		t.Fatalf("ToolErrorPolicy: isError=%t replayed=%t text=%q runs=%d", res.IsError, idemmcp.Replayed(res), textOf(res), r.count())
	}
}

func TestAddTool_OutcomeUnknown(t *testing.T) {
	// A policy that holds every outcome leaves the claim for recovery; with
	// no Resolver, nobody can tell whether the refund happened.
	hold := func(idem.Result, error) idem.Decision { return idem.DecisionHold }
	r := &refunds{}
	cs := connect(t, newServer(shared(t, &idem.Options{Policy: hold}), r), "")
	call(t, cs, "k", "o-1", 5)
	res := call(t, cs, "k", "o-1", 5)
	if idemmcp.Status(res) != idemmcp.StatusOutcomeUnknown || !strings.Contains(textOf(res), "operator") || r.count() != 1 {
		t.Fatalf("held claim: status=%q text=%q runs=%d", idemmcp.Status(res), textOf(res), r.count())
	}
}

func TestAddTool_Unavailable(t *testing.T) {
	store := newStore(t, nil)
	r := &refunds{}
	cs := connect(t, newServer(idemmcp.New(store, &idemmcp.Options{SharedScope: true}), r), "")
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	res := call(t, cs, "k", "o-1", 5)
	if idemmcp.Status(res) != idemmcp.StatusUnavailable || res.Meta[idemmcp.MetaRetryAfter] == nil || r.count() != 0 {
		t.Fatalf("closed store: status=%q meta=%v runs=%d", idemmcp.Status(res), res.Meta, r.count())
	}
}

func TestGuard_KeyArgument(t *testing.T) {
	r := &refunds{}
	g := idemmcp.New(newStore(t, nil), &idemmcp.Options{SharedScope: true, KeyArgument: "idempotency_key"})
	cs := connect(t, newServer(g, r), "")
	args := map[string]any{"order_id": "o-1", "amount_cents": 5, "idempotency_key": "arg-key"}
	first, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "refund_order", Arguments: args})
	if err != nil || first.IsError {
		t.Fatalf("key in an argument: %v %q", err, textOf(first))
	}
	// The key argument is not part of the fingerprint: the same key in
	// _meta with the same arguments is the same call.
	if res := call(t, cs, "arg-key", "o-1", 5); !idemmcp.Replayed(res) || r.count() != 1 {
		t.Fatalf("same key in _meta: replayed=%t runs=%d", idemmcp.Replayed(res), r.count())
	}
	// The same key in _meta and the argument is one key.
	res, err := cs.CallTool(context.Background(), idemmcp.WithKey(&mcp.CallToolParams{Name: "refund_order", Arguments: args}, "arg-key"))
	if err != nil || !idemmcp.Replayed(res) || r.count() != 1 {
		t.Fatalf("the same key in _meta and the argument: %v replayed=%t runs=%d", err, idemmcp.Replayed(res), r.count())
	}
	// Another key in the argument than in _meta is invalid params.
	args["idempotency_key"] = "other"
	_, err = cs.CallTool(context.Background(), idemmcp.WithKey(&mcp.CallToolParams{Name: "refund_order", Arguments: args}, "arg-key"))
	if err == nil || !strings.Contains(err.Error(), "two different idempotency keys") || r.count() != 1 {
		t.Fatalf("two keys: %v, runs=%d", err, r.count())
	}
}

func TestMiddleware_ProtectsAndAdvertises(t *testing.T) {
	g := idemmcp.New(newStore(t, nil), &idemmcp.Options{SharedScope: true})
	r := &refunds{}
	s := mcp.NewServer(&mcp.Implementation{Name: "refunds", Version: "v0"}, nil)
	mcp.AddTool(s, refundTool, r.handle) // added plainly: the middleware protects it
	mcp.AddTool(s, listTool, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "[]"}}}, nil, nil
	})
	s.AddReceivingMiddleware(g.Middleware())
	cs := connect(t, s, "")

	if _, ok := cs.InitializeResult().Capabilities.Experimental[idemmcp.Capability]; !ok {
		t.Fatalf("no experimental idempotency capability: %+v", cs.InitializeResult().Capabilities)
	}
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools.Tools {
		_, advertised := tool.Meta[idemmcp.Capability]
		if want := tool.Name == "refund_order"; advertised != want ||
			strings.Contains(tool.Description, idemmcp.MetaKey) != want {
			t.Fatalf("tool %s: advertised=%t description=%q", tool.Name, advertised, tool.Description)
		}
	}
	if res := call(t, cs, "", "o-1", 5); idemmcp.Status(res) != idemmcp.StatusMissingKey {
		t.Fatalf("middleware let a write call through without a key")
	}
	call(t, cs, "k", "o-1", 5)
	if res := call(t, cs, "k", "o-1", 5); !idemmcp.Replayed(res) || r.count() != 1 {
		t.Fatalf("middleware: replayed=%t runs=%d", idemmcp.Replayed(res), r.count())
	}
	if res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "list_refunds"}); err != nil || res.IsError {
		t.Fatalf("read-only tool behind the middleware: %v", err)
	}
}

func TestMiddleware_WithAddToolClaimsOnce(t *testing.T) {
	// A tool added with idemmcp.AddTool on a server that also has the
	// middleware is protected once, not twice (which would refuse itself).
	g := idemmcp.New(newStore(t, nil), &idemmcp.Options{SharedScope: true})
	r := &refunds{}
	s := newServer(g, r)
	s.AddReceivingMiddleware(g.Middleware())
	cs := connect(t, s, "")
	if res := call(t, cs, "k", "o-1", 5); res.IsError {
		t.Fatalf("doubly protected call: %q", textOf(res))
	}
	if res := call(t, cs, "k", "o-1", 5); !idemmcp.Replayed(res) || r.count() != 1 {
		t.Fatalf("replayed=%t runs=%d", idemmcp.Replayed(res), r.count())
	}
}

// TestMiddleware_PanicReleases runs over the in-memory transports with a
// recovering middleware outside the guard, as a server that must survive
// a panicking tool has: the panic releases the claim, and the retry runs.
func TestMiddleware_PanicReleases(t *testing.T) {
	g := idemmcp.New(newStore(t, nil), &idemmcp.Options{SharedScope: true})
	runs := 0
	s := mcp.NewServer(&mcp.Implementation{Name: "refunds", Version: "v0"}, nil)
	mcp.AddTool(s, refundTool, func(context.Context, *mcp.CallToolRequest, refundIn) (*mcp.CallToolResult, refundOut, error) {
		runs++
		if runs == 1 {
			panic("downstream blew up")
		}
		return nil, refundOut{RefundID: "re_2"}, nil
	})
	s.AddReceivingMiddleware(g.Middleware())
	var recovered any
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler { // outermost: added last
		return func(ctx context.Context, method string, req mcp.Request) (res mcp.Result, err error) {
			defer func() {
				if p := recover(); p != nil {
					recovered, res, err = p, nil, errors.New("internal error")
				}
			}()
			return next(ctx, method, req)
		}
	})
	cs := connect(t, s, "")
	p := idemmcp.WithKey(&mcp.CallToolParams{Name: "refund_order", Arguments: map[string]any{"order_id": "o-1", "amount_cents": 5}}, "k")
	if _, err := cs.CallTool(context.Background(), p); err == nil || recovered != "downstream blew up" {
		t.Fatalf("panicking call: err=%v recovered=%v", err, recovered)
	}
	res, err := cs.CallTool(context.Background(), p)
	if err != nil || res.IsError || idemmcp.Replayed(res) || runs != 2 {
		t.Fatalf("retry after the panic: err=%v replayed=%t runs=%d", err, idemmcp.Replayed(res), runs)
	}
}

// TestAddTxTool_NeedsTxBackend: the embedded store runs no effect in a
// transaction, so adding a transactional tool on it is a programmer error.
func TestAddTxTool_NeedsTxBackend(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "does not run effects in a") {
			t.Fatalf("AddTxTool on the embedded store: panic %v", r)
		}
	}()
	s := mcp.NewServer(&mcp.Implementation{Name: "tx", Version: "v0"}, nil)
	idemmcp.AddTxTool(shared(t, nil), s, refundTool,
		func(context.Context, struct{}, *mcp.CallToolRequest, refundIn) (*mcp.CallToolResult, refundOut, error) {
			return nil, refundOut{}, nil
		})
}
