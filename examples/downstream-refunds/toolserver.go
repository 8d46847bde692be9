package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"path/filepath"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemmcp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// RefundArgs are refund_order's arguments.
type RefundArgs struct {
	OrderID     string `json:"order_id" jsonschema:"the order to refund"`
	AmountCents int    `json:"amount_cents" jsonschema:"the amount to refund, in cents"`
}

// Refund is refund_order's answer: the payment API's refund, and the key
// it was asked under.
type Refund struct {
	Payment
	DownstreamKey string `json:"downstream_key"`
}

// runServe serves refund_order over stdio until ctx ends or stdin closes.
func runServe(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var dir, payments, block string
	fs.StringVar(&dir, "dir", "downstream-refunds-data", "directory of the idempotency store")
	fs.StringVar(&payments, "payments", "http://127.0.0.1:8090", "the payment API's base URL")
	// Test only: make refund_order stop for good there, so that a crash
	// test can kill it with SIGKILL.
	fs.StringVar(&block, "test-block", "", `test only: "before-payment" or "after-payment" blocks refund_order there`)
	if err := fs.Parse(args); err != nil {
		return err
	}
	// The tool keeps no ledger of its own: after a crash it cannot tell
	// whether the refund was made, and it need not, since the payment API
	// deduplicates by the downstream key. So recovery releases the claim,
	// and the retry runs the refund again under the same key.
	notCommitted := idem.ResolverFunc(func(context.Context, *idem.Record) (idem.Resolution, error) {
		return idem.Resolution{Verdict: idem.VerdictNotCommitted}, nil
	})
	store, err := idem.Open(filepath.Join(dir, "idem"), &idem.Options{Resolver: notCommitted})
	if err != nil {
		return err
	}
	defer store.Close()
	stop := func(stage string) {
		if stage == block {
			fmt.Fprintln(stderr, "downstream-refunds: blocked", stage)
			<-make(chan struct{}) // until the process is killed
		}
	}
	server := newServer(store, payments, stop)
	return server.Run(ctx, &mcp.StdioTransport{})
}

// newServer builds the tool server: refund_order, protected by a Guard
// whose callers share one scope (a local stdio server).
func newServer(store *idem.Store, payments string, stop func(stage string)) *mcp.Server {
	guard := idemmcp.New(store, &idemmcp.Options{SharedScope: true})
	server := mcp.NewServer(&mcp.Implementation{Name: "downstream-refunds", Version: "v1.0.0"}, nil)
	// Every request this client sends inside an effect carries the
	// effect's downstream key for "payments".
	client := &http.Client{Transport: idemhttp.DownstreamKeys{Name: "payments"}}
	idemmcp.AddTool(guard, server, &mcp.Tool{Name: "refund_order", Description: "Refund an amount of an order."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in RefundArgs) (*mcp.CallToolResult, Refund, error) {
			key, err := idem.DownstreamKey(ctx, "payments")
			if err != nil {
				return nil, Refund{}, err
			}
			stop("before-payment")
			pay, err := refund(ctx, client, payments, in)
			if err != nil {
				return nil, Refund{}, err
			}
			stop("after-payment")
			return nil, Refund{Payment: pay, DownstreamKey: key}, nil
		})
	return server
}

// refund asks the payment API for the refund.
func refund(ctx context.Context, client *http.Client, base string, in RefundArgs) (Payment, error) {
	body, err := json.Marshal(in)
	if err != nil {
		return Payment{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/refunds", bytes.NewReader(body))
	if err != nil {
		return Payment{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := client.Do(req)
	if err != nil {
		return Payment{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 1<<16))
	if err != nil {
		return Payment{}, err
	}
	if res.StatusCode != http.StatusOK {
		return Payment{}, fmt.Errorf("the payment API answered %s: %s", res.Status, bytes.TrimSpace(b))
	}
	var pay Payment
	return pay, json.Unmarshal(b, &pay)
}
