package idemmcp_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/badgerstore"
	"github.com/idemkit/idem/idemmcp"
	"github.com/idemkit/idem/idemtest"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// sharedBackend lets two Stores share one Badger backend (the test closes
// it), keeping its LateCompleter.
type sharedBackend struct{ *badgerstore.Backend }

func (sharedBackend) Close() error { return nil }

// refundScope is the scope of refund_order's records under SharedScope.
const refundScope = `mcp:"refund_order"`

// pausedCall calls refund_order with key through a Guard on Store a while
// the tool waits on its gate, as a process paused past its lease; Store b,
// another instance on the same Badger store and clock, sweeps the claim
// away ("not committed") and, if claimAgain, claims the key itself (the
// claim is returned). finish opens the gate and returns the call's result.
func pausedCall(t *testing.T, key string, claimAgain bool) (cs *mcp.ClientSession, b *idem.Store, newer *idem.Claim, finish func() *mcp.CallToolResult) {
	t.Helper()
	const lease = 10 * time.Second
	bk, err := badgerstore.Open(t.TempDir(), badgerstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bk.Close() })
	clock := idemtest.NewClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	notCommitted := idem.ResolverFunc(func(context.Context, *idem.Record) (idem.Resolution, error) {
		return idem.Resolution{Verdict: idem.VerdictNotCommitted}, nil
	})
	open := func(owner string, res idem.Resolver) *idem.Store {
		s := idem.New(sharedBackend{bk}, &idem.Options{Clock: clock, Lease: lease, SweepInterval: -1,
			Owner: owner, Resolver: res, RecoveryGrace: -1})
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	a := open("a", nil)
	b = open("b", notCommitted)
	r := &refunds{started: make(chan struct{}, 1), gate: make(chan struct{})}
	cs = connect(t, newServer(idemmcp.New(a, &idemmcp.Options{SharedScope: true}), r), "")
	out := make(chan *mcp.CallToolResult, 1)
	go func() { out <- call(t, cs, key, "o-1", 5) }()
	<-r.started
	clock.Advance(lease)
	if rep, err := b.Sweep(context.Background()); err != nil || rep.NotCommitted != 1 {
		t.Fatalf("sweep: %+v %v", rep, err)
	}
	if claimAgain {
		fp := recordOf(t, b, key).Fingerprint
		newer, _, err = b.Begin(context.Background(), idem.Request{Scope: refundScope, Key: key, Fingerprint: fp})
		if err != nil || newer == nil {
			t.Fatalf("claim again: %v", err)
		}
	}
	return cs, b, newer, func() *mcp.CallToolResult { close(r.gate); return <-out }
}

func recordOf(t *testing.T, s *idem.Store, key string) *idem.Record {
	t.Helper()
	rec, err := s.Get(context.Background(), refundScope, key)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// The tool's claim was recovered while it ran and nobody claimed the key
// since: its answer is recorded late, returned, and replayed.
func TestGuard_LateCompletion_RecordedIsAnswered(t *testing.T) {
	cs, b, _, finish := pausedCall(t, "k", false)
	res := finish()
	if res.IsError || idemmcp.Status(res) != "" || refundOf(t, res).RefundID != "re_1" {
		t.Fatalf("got isError=%t status=%q %q, want the tool's answer", res.IsError, idemmcp.Status(res), textOf(res))
	}
	again := call(t, cs, "k", "o-1", 5)
	if !idemmcp.Replayed(again) || refundOf(t, again).RefundID != "re_1" {
		t.Fatalf("repeat: replayed=%t %q", idemmcp.Replayed(again), textOf(again))
	}
	if recordOf(t, b, "k").MayHaveRunTwice {
		t.Fatal("marked although nobody else claimed the key")
	}
}

// The tool's claim was recovered and another call claimed the key before
// the tool finished: its answer is not the recorded one and is not
// returned; the caller gets ran_twice, and a retry the other call's outcome.
func TestGuard_LateCompletion_RanTwiceIsRefused(t *testing.T) {
	cs, b, newer, finish := pausedCall(t, "k", true)
	res := finish()
	if !res.IsError || idemmcp.Status(res) != idemmcp.StatusRanTwice || res.Meta[idemmcp.MetaRetryAfter] == nil {
		t.Fatalf("got isError=%t meta=%v %q, want status ran_twice", res.IsError, res.Meta, textOf(res))
	}
	saved, err := idemmcp.SavedResult(&mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "newer"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := newer.Complete(context.Background(), saved); err != nil {
		t.Fatal(err)
	}
	again := call(t, cs, "k", "o-1", 5)
	if !idemmcp.Replayed(again) || textOf(again) != "newer" {
		t.Fatalf("retry: replayed=%t %q, want the other call's outcome", idemmcp.Replayed(again), textOf(again))
	}
	if !recordOf(t, b, "k").MayHaveRunTwice {
		t.Fatal("the key is not marked")
	}
}
