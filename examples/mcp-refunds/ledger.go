package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemmcp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Refund is one refund in the ledger, and refund_order's structured output.
type Refund struct {
	RefundID    string `json:"refund_id"`
	OrderID     string `json:"order_id"`
	AmountCents int    `json:"amount_cents"`
}

// entry is a ledger line: the refund, and the idempotency record it was
// made under, so that recovery can tell whether a call took effect.
type entry struct {
	Refund
	Scope string `json:"scope"`
	Key   string `json:"key"`
}

// Ledger is the downstream system: an append-only file of refunds, one
// JSON line each, synced to disk before a refund is answered. It stands
// for a payment provider that can be asked whether a refund was made.
type Ledger struct {
	mu      sync.Mutex // guards f and entries, and orders appends
	f       *os.File
	entries []entry
}

// OpenLedger opens or creates the ledger file and reads what it holds. A
// torn last line (the process died while writing it) is dropped: its
// refund was never answered, and no sync covered it.
func OpenLedger(path string) (*Ledger, error) {
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	l := &Ledger{}
	good := 0
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var e entry
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			break
		}
		l.entries = append(l.entries, e)
		good += len(sc.Bytes()) + 1
	}
	if good < len(data) {
		if err := os.Truncate(path, int64(good)); err != nil {
			return nil, err
		}
	}
	if l.f, err = os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err != nil {
		return nil, err
	}
	return l, nil
}

// Close closes the ledger file.
func (l *Ledger) Close() error { return l.f.Close() }

// Refund appends a refund made under (scope, key) and syncs it.
func (l *Ledger) Refund(scope, key, order string, amount int) (Refund, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := entry{Refund: Refund{RefundID: fmt.Sprintf("re_%d", len(l.entries)+1), OrderID: order, AmountCents: amount},
		Scope: scope, Key: key}
	line, err := json.Marshal(e)
	if err != nil {
		return Refund{}, err
	}
	if _, err := l.f.Write(append(line, '\n')); err != nil {
		return Refund{}, err
	}
	if err := l.f.Sync(); err != nil {
		return Refund{}, err
	}
	l.entries = append(l.entries, e)
	return e.Refund, nil
}

// List returns every refund the ledger holds.
func (l *Ledger) List() []Refund {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Refund, 0, len(l.entries))
	for _, e := range l.entries {
		out = append(out, e.Refund)
	}
	return out
}

// Resolve implements idem.Resolver: a claim whose process died took
// effect if the ledger holds a refund made under its scope and key. The
// answer saved is the one refund_order gave, so a retry replays it.
func (l *Ledger) Resolve(_ context.Context, rec *idem.Record) (idem.Resolution, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.entries {
		if e.Scope == rec.Scope && e.Key == rec.Key {
			res, err := idemmcp.SavedResult(refundResult(e.Refund))
			if err != nil {
				return idem.Resolution{}, err
			}
			return idem.Resolution{Verdict: idem.VerdictCommitted, Result: res}, nil
		}
	}
	// Every refund is synced before it is answered, and the claim was
	// synced before the refund ran: no line means no refund.
	return idem.Resolution{Verdict: idem.VerdictNotCommitted}, nil
}

// refundResult is the answer the SDK builds for refund_order's output:
// the structured content, and the same JSON as text.
func refundResult(r Refund) *mcp.CallToolResult {
	b, _ := json.Marshal(r)
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(b)}},
		StructuredContent: json.RawMessage(b)}
}
