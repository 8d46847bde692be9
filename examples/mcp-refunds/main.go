// Command mcp-refunds is an MCP tool server with one write tool that must
// never run twice for one intended effect, refund_order, and one read-only
// tool, list_refunds. refund_order is protected by idemmcp: a call
// retried with the same idempotency key (params._meta.idempotencyKey)
// refunds once and replays the first answer, even across a crash of the
// server, since a Resolver over the refund ledger tells after a restart
// whether an interrupted refund happened.
//
//	mcp-refunds -dir ./data               # stdio, for an MCP host to spawn
//	mcp-refunds -dir ./data -http :8080   # streamable HTTP on 127.0.0.1:8080
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemmcp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "mcp-refunds:", err)
		os.Exit(1)
	}
}

// RefundArgs are refund_order's arguments.
type RefundArgs struct {
	OrderID     string `json:"order_id" jsonschema:"the order to refund"`
	AmountCents int    `json:"amount_cents" jsonschema:"the amount to refund, in cents"`
}

// RefundList is list_refunds' output.
type RefundList struct {
	Refunds []Refund `json:"refunds"`
}

func run(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("mcp-refunds", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "mcp-refunds-data", "directory of the ledger and the idempotency store")
	addr := fs.String("http", "", "serve streamable HTTP on this address (host defaults to 127.0.0.1) instead of stdio")
	// Test only: make refund_order stop for good before or after it writes
	// its ledger line, so that a crash test can kill it there.
	block := fs.String("test-block", "", `test only: "before-ledger" or "after-ledger" blocks refund_order there`)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := os.MkdirAll(*dir, 0o700); err != nil {
		return err
	}
	ledger, err := OpenLedger(filepath.Join(*dir, "ledger.jsonl"))
	if err != nil {
		return err
	}
	defer ledger.Close()
	store, err := idem.Open(filepath.Join(*dir, "idem"), &idem.Options{Resolver: ledger})
	if err != nil {
		return err
	}
	defer store.Close()

	server := newServer(store, ledger, func(stage string) {
		if stage == *block {
			fmt.Fprintln(stderr, "mcp-refunds: blocked", stage)
			<-make(chan struct{}) // until the process is killed
		}
	})
	if *addr == "" {
		return server.Run(ctx, idemmcp.TopLevelKeys(&mcp.StdioTransport{}))
	}
	return serveHTTP(ctx, server, *addr, stderr)
}

// newServer builds the server: refund_order protected by a Guard whose
// callers share one scope (a local server with no authentication; behind
// auth.RequireBearerToken, use Options.Authenticated instead).
func newServer(store *idem.Store, ledger *Ledger, stop func(stage string)) *mcp.Server {
	guard := idemmcp.New(store, &idemmcp.Options{SharedScope: true})
	server := mcp.NewServer(&mcp.Implementation{Name: "mcp-refunds", Version: "v1.0.0"}, nil)

	idemmcp.AddTool(guard, server, &mcp.Tool{Name: "refund_order", Description: "Refund an amount of an order."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in RefundArgs) (*mcp.CallToolResult, Refund, error) {
			if in.OrderID == "" || in.AmountCents <= 0 {
				return nil, Refund{}, errors.New("order_id and a positive amount_cents are required")
			}
			// The claim names the record this refund is made under; the
			// ledger keeps it, so that recovery can find the refund.
			claim, ok := idem.ClaimFromContext(ctx)
			if !ok {
				return nil, Refund{}, errors.New("refund_order runs only under an idempotency claim")
			}
			stop("before-ledger")
			r, err := ledger.Refund(claim.Scope(), claim.Key(), in.OrderID, in.AmountCents)
			if err != nil {
				return nil, Refund{}, err
			}
			stop("after-ledger")
			return nil, r, nil
		})

	mcp.AddTool(server, &mcp.Tool{Name: "list_refunds", Description: "List every refund the ledger holds.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, RefundList, error) {
			return nil, RefundList{Refunds: ledger.List()}, nil
		})
	return server
}

func serveHTTP(ctx context.Context, server *mcp.Server, addr string, stderr io.Writer) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("-http %q: %w", addr, err)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, port))
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "mcp-refunds: serving streamable HTTP on http://%s\n", ln.Addr())
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
	srv := &http.Server{Handler: idemmcp.TopLevelKeysHTTP(h)}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
