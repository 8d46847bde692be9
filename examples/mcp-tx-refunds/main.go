// Command mcp-tx-refunds is an MCP tool server whose refund_order books
// its refund in PostgreSQL, in the same transaction that completes the
// call's idempotency record (idemmcp.AddTxTool over idem.DoTx and
// pgstore): the refund row exists exactly when the key is done. A call
// whose server paused past its lease while another took the key over
// commits nothing, and no Resolver is needed after a crash: a call that
// did not commit wrote nothing, so it runs again.
//
//	mcp-tx-refunds -postgres postgres://user@127.0.0.1/shop   # MCP over stdio
package main

import (
	"context"
	"flag"
	"io"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemmcp"
	"github.com/idemkit/idem/pgstore"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("mcp-tx-refunds: ")
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := serve(ctx, os.Args[1:], os.Stderr); err != nil {
		log.Print(err)
		cancel()
		os.Exit(1)
	}
}

// RefundArgs are refund_order's arguments.
type RefundArgs struct {
	OrderID     string `json:"order_id" jsonschema:"the order to refund"`
	AmountCents int    `json:"amount_cents" jsonschema:"the amount to refund, in cents"`
}

// Refund is refund_order's answer: the row it booked.
type Refund struct {
	RefundID    int64  `json:"refund_id"`
	OrderID     string `json:"order_id"`
	AmountCents int    `json:"amount_cents"`
}

// schema creates the refunds table beside the idempotency records.
const schema = `CREATE TABLE IF NOT EXISTS refunds (
	refund_id bigserial PRIMARY KEY,
	order_id text NOT NULL,
	amount_cents integer NOT NULL CHECK (amount_cents > 0)
)`

func serve(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("mcp-tx-refunds", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("postgres", os.Getenv("DATABASE_URL"), "the PostgreSQL database (default $DATABASE_URL)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, *url)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, schema); err != nil {
		return err
	}
	b, err := pgstore.New(ctx, pool, nil)
	if err != nil {
		return err
	}
	store := idem.New(b, nil)
	defer store.Close()
	return newServer(store, nil).Run(ctx, &mcp.StdioTransport{})
}

// newServer builds the server: refund_order, protected by a Guard whose
// callers share one scope (a local stdio server). booked, if set, runs
// after the refund row is written and before the transaction commits (a
// test pauses there).
func newServer(store *idem.Store, booked func()) *mcp.Server {
	guard := idemmcp.New(store, &idemmcp.Options{SharedScope: true})
	server := mcp.NewServer(&mcp.Implementation{Name: "mcp-tx-refunds", Version: "v1.0.0"}, nil)
	idemmcp.AddTxTool(guard, server, refundTool, refund(booked))
	return server
}

var refundTool = &mcp.Tool{Name: "refund_order", Description: "Refund an amount of an order."}

// refund is refund_order: it books the refund with the call's transaction,
// so the row commits with the call's record or not at all.
func refund(booked func()) idemmcp.TxToolHandler[pgx.Tx, RefundArgs, Refund] {
	return func(ctx context.Context, tx pgx.Tx, _ *mcp.CallToolRequest, in RefundArgs) (*mcp.CallToolResult, Refund, error) {
		r := Refund{OrderID: in.OrderID, AmountCents: in.AmountCents}
		err := tx.QueryRow(ctx, `INSERT INTO refunds (order_id, amount_cents) VALUES ($1, $2) RETURNING refund_id`,
			in.OrderID, in.AmountCents).Scan(&r.RefundID)
		if err != nil {
			return nil, Refund{}, err
		}
		if booked != nil {
			booked()
		}
		return nil, r, nil
	}
}
