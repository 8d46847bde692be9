package idemmcp_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemmcp"
	"github.com/idemkit/idem/idemtest"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A tool that acts and then panics, behind a store with a Resolver: the
// claim is held, the panic re-raised, and the repeat gets what the
// Resolver decides, never a second run.
func TestHandler_PanicHeldForResolver(t *testing.T) {
	clock := idemtest.NewClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	var acted, asked atomic.Int32
	resolver := idem.ResolverFunc(func(ctx context.Context, rec *idem.Record) (idem.Resolution, error) {
		asked.Add(1)
		if acted.Load() == 0 {
			return idem.Resolution{Verdict: idem.VerdictNotCommitted}, nil
		}
		res, err := idemmcp.SavedResult(&mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "refunded (ledger)"}}})
		return idem.Resolution{Verdict: idem.VerdictCommitted, Result: res}, err
	})
	var heldScope atomic.Value // the scope of the held claim, from its EventHeld
	observer := idem.ObserverFunc(func(e idem.Event) {
		if e.Kind == idem.EventHeld && e.Reason == "panic" {
			heldScope.Store(e.Scope)
		}
	})
	opts := &idem.Options{Clock: clock, Resolver: resolver, Observer: observer, SweepInterval: -1}
	store, err := idem.Open(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	g := idemmcp.New(store, &idemmcp.Options{SharedScope: true})
	h := g.Handler(refundTool, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if acted.Add(1) == 1 {
			panic("downstream blew up")
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "refunded again"}}}, nil
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
	scope, ok := heldScope.Load().(string)
	if !ok {
		t.Fatal("no claim was held after the panic")
	}
	held, err := store.Get(context.Background(), scope, "k")
	if err != nil || held.State != idem.StateInProgress || !held.Stale(clock.Now()) {
		t.Fatalf("record %+v (%v): want held, in progress with its lease ended", held, err)
	}
	// The panic may have left a write in flight: the Resolver is asked
	// once the grace is over.
	clock.Advance(store.Options().RecoveryGrace)
	res, err := h(context.Background(), req)
	if err != nil || res.IsError || !idemmcp.Replayed(res) || textOf(res) != "refunded (ledger)" {
		t.Fatalf("repeat: err=%v isError=%t replayed=%t text=%q", err, res.IsError, idemmcp.Replayed(res), textOf(res))
	}
	if acted.Load() != 1 || asked.Load() != 1 {
		t.Fatalf("the tool ran %d times and the Resolver was asked %d times, want 1 and 1", acted.Load(), asked.Load())
	}
}
