// Command downstream-refunds shows a tool whose effect calls another API:
// an MCP tool server whose refund_order asks a payment API for the
// refund, sending it an Idempotency-Key derived from the claim
// (idem.DownstreamKey, through idemhttp.DownstreamKeys). The tool server
// keeps no record of its own that recovery could read, so after a crash
// its Resolver answers "not committed" and the refund runs again; the
// payment API, which deduplicates by that key, answers the second request
// with the first refund instead of paying twice.
//
//	downstream-refunds payments -addr 127.0.0.1:8090 -ledger ./payments.jsonl
//	downstream-refunds serve -dir ./data -payments http://127.0.0.1:8090   # MCP over stdio
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "downstream-refunds: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New(`say "payments" (the payment API) or "serve" (the MCP tool server)`)
	}
	switch args[0] {
	case "payments":
		return runPayments(ctx, args[1:], stderr)
	case "serve":
		return runServe(ctx, args[1:], stderr)
	}
	return fmt.Errorf("unknown command %q: say payments or serve", args[0])
}
