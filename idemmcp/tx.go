package idemmcp

import (
	"context"
	"fmt"
	"reflect"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TxToolHandler is the handler of a tool added by AddTxTool: a typed tool
// handler (as mcp.ToolHandlerFor) that also gets the transaction its
// effect writes with, a pgx.Tx on pgstore. It must not commit or roll tx
// back itself.
type TxToolHandler[Tx, In, Out any] func(ctx context.Context, tx Tx, req *mcp.CallToolRequest, in In) (*mcp.CallToolResult, Out, error)

// txKey carries, in a tool's context, the transaction of the idem.DoTx
// that runs it.
type txKey struct{}

// AddTxTool adds a typed write tool to s, protected by g as AddTool
// protects one, whose effect runs through idem.DoTx: h writes with tx, a
// transaction of the store's backend (so Tx is pgx.Tx on pgstore), and
// when the store's Policy saves the answer, the call's record is completed
// in that transaction, fenced by the claim's token, and the two commit
// together. A tool that stalled past its lease while another call with
// the key took over cannot commit: its transaction rolls back, nothing it
// wrote stands, and its caller gets a tool error with status taken_over
// (a retry gets the other call's answer). A tool error, a protocol error
// or a panic rolls the transaction back too.
//
// Recovery needs no Resolver for these calls: a call whose process died
// committed nothing, so its claim is released and a retry runs it.
//
// AddTxTool panics if g's store does not run effects in transactions of
// type Tx (its backend is not a backend.TxBackend[Tx]), or if t is
// annotated read-only or idempotent (such tools take no key, so there is
// no claim to commit with). Guard.Middleware on the same server leaves the
// tool to the middleware AddTxTool adds.
func AddTxTool[Tx, In, Out any](g *Guard, s *mcp.Server, t *mcp.Tool, h TxToolHandler[Tx, In, Out]) {
	if _, ok := g.store.Backend().(backend.TxBackend[Tx]); !ok {
		panic(fmt.Sprintf("idemmcp: AddTxTool %s: the store's backend %T does not run effects in a %T",
			t.Name, g.store.Backend(), reflect.TypeFor[Tx]()))
	}
	if !writeTool(t) {
		panic(fmt.Sprintf("idemmcp: AddTxTool %s: a tool annotated read-only or idempotent takes no key", t.Name))
	}
	name := t.Name
	g.txTools.Store(name, struct{}{})
	mcp.AddTool(s, t, func(ctx context.Context, req *mcp.CallToolRequest, in In) (*mcp.CallToolResult, Out, error) {
		tx, ok := ctx.Value(txKey{}).(Tx)
		if !ok {
			var zero Out
			return nil, zero, fmt.Errorf("idemmcp: tool %s runs only inside its idempotency transaction", name)
		}
		return h(ctx, tx, req, in)
	})
	s.AddReceivingMiddleware(g.middleware(t, runner{do: doTx[Tx], tx: true}))
}

// doTx runs fn through idem.DoTx, with the transaction in its context.
func doTx[Tx any](ctx context.Context, s *idem.Store, req idem.Request,
	fn func(context.Context) (idem.Result, error)) (idem.Result, bool, error) {
	return idem.DoTx(ctx, s, req, func(ctx context.Context, tx Tx) (idem.Result, error) {
		return fn(context.WithValue(ctx, txKey{}, tx))
	})
}
