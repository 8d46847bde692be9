package idemmcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem/idemmcp"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// callMeta calls refund_order with meta as params._meta.
func callMeta(cs *mcp.ClientSession, meta mcp.Meta, args map[string]any) (*mcp.CallToolResult, error) {
	if args == nil {
		args = map[string]any{"order_id": "o-1", "amount_cents": 100}
	}
	return cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "refund_order", Arguments: args, Meta: meta})
}

// TestGuard_KeyNames sends a key under each name a client may use: each
// is read, and the same key under another name is the same call.
func TestGuard_KeyNames(t *testing.T) {
	names := []string{idemmcp.MetaKey, idemmcp.MetaKeyDashed, idemmcp.MetaKeyNamespaced}
	for i, name := range names {
		t.Run(name, func(t *testing.T) {
			r := &refunds{}
			cs := connect(t, newServer(shared(t, nil), r), "")
			first, err := callMeta(cs, mcp.Meta{name: "k-1"}, nil)
			if err != nil || first.IsError || idemmcp.Replayed(first) {
				t.Fatalf("first call: %v %+v", err, first)
			}
			other := names[(i+1)%len(names)]
			again, err := callMeta(cs, mcp.Meta{other: "k-1"}, nil)
			if err != nil || !idemmcp.Replayed(again) || r.count() != 1 {
				t.Fatalf("the key under %s: %v replayed=%t runs=%d", other, err, idemmcp.Replayed(again), r.count())
			}
		})
	}
}

// TestGuard_KeyNames_Argument reads a declared key argument after every
// _meta name.
func TestGuard_KeyNames_Argument(t *testing.T) {
	r := &refunds{}
	g := idemmcp.New(newStore(t, nil), &idemmcp.Options{SharedScope: true, KeyArgument: "idempotency_key"})
	cs := connect(t, newServer(g, r), "")
	args := map[string]any{"order_id": "o-1", "amount_cents": 100, "idempotency_key": "k-arg"}
	if res, err := callMeta(cs, nil, args); err != nil || res.IsError {
		t.Fatalf("key argument: %v %+v", err, res)
	}
	res, err := callMeta(cs, mcp.Meta{idemmcp.MetaKeyDashed: "k-arg", idemmcp.MetaKeyNamespaced: "k-arg"}, args)
	if err != nil || !idemmcp.Replayed(res) || r.count() != 1 {
		t.Fatalf("one key under three names: %v replayed=%t runs=%d", err, idemmcp.Replayed(res), r.count())
	}
}

// TestGuard_KeyNames_Conflict sends two different keys in one call: an
// invalid-params error, and nothing runs.
func TestGuard_KeyNames_Conflict(t *testing.T) {
	r := &refunds{}
	cs := connect(t, newServer(shared(t, nil), r), "")
	for _, meta := range []mcp.Meta{
		{idemmcp.MetaKey: "a", idemmcp.MetaKeyDashed: "b"},
		{idemmcp.MetaKeyDashed: "a", idemmcp.MetaKeyNamespaced: "b"},
		{idemmcp.MetaKey: "a", idemmcp.MetaKeyDashed: "a", idemmcp.MetaKeyNamespaced: "b"},
	} {
		_, err := callMeta(cs, meta, nil)
		var rpc *jsonrpc.Error
		if !errors.As(err, &rpc) || rpc.Code != jsonrpc.CodeInvalidParams {
			t.Fatalf("%v: %v, want invalid params", meta, err)
		}
	}
	if r.count() != 0 {
		t.Fatalf("refund ran %d times", r.count())
	}
}

// TestAddTool_ReplayFirstRunAt checks a replay's _meta: replayed, the time
// the first call began to run, and the first call's content unchanged.
func TestAddTool_ReplayFirstRunAt(t *testing.T) {
	r := &refunds{}
	cs := connect(t, newServer(shared(t, nil), r), "")
	before := time.Now().Add(-time.Millisecond)
	first := call(t, cs, "k-1", "o-1", 100)
	after := time.Now()
	if _, ok := first.Meta[idemmcp.MetaFirstRunAt]; ok {
		t.Fatalf("a first answer carries %s: %v", idemmcp.MetaFirstRunAt, first.Meta)
	}
	var stamps []any
	for range 2 {
		res := call(t, cs, "k-1", "o-1", 100)
		if !idemmcp.Replayed(res) {
			t.Fatalf("no replay: %v", res.Meta)
		}
		at, ok := idemmcp.FirstRunAt(res)
		if !ok || at.Before(before) || at.After(after) {
			t.Fatalf("%s = %v (%v), want between %v and %v", idemmcp.MetaFirstRunAt, res.Meta[idemmcp.MetaFirstRunAt], at, before, after)
		}
		if s, _ := res.Meta[idemmcp.MetaFirstRunAt].(string); s != at.UTC().Format("2006-01-02T15:04:05.000Z") {
			t.Fatalf("%s = %q, not RFC 3339 in UTC with milliseconds", idemmcp.MetaFirstRunAt, s)
		}
		stamps = append(stamps, res.Meta[idemmcp.MetaFirstRunAt])
		c1, _ := json.Marshal(first.Content)
		c2, _ := json.Marshal(res.Content)
		s1, _ := json.Marshal(first.StructuredContent)
		s2, _ := json.Marshal(res.StructuredContent)
		if string(c1) != string(c2) || string(s1) != string(s2) {
			t.Fatalf("replayed content %s %s, first %s %s", c2, s2, c1, s1)
		}
	}
	if stamps[0] != stamps[1] {
		t.Fatalf("first run times differ between replays: %v", stamps)
	}
}
