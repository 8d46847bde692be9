package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/idemkit/idem/idemhttp"
)

// errBadRefund is the payment API's answer to a refund it cannot make.
var errBadRefund = errors.New("a refund needs an order_id and a positive amount_cents")

// Payment is one refund the payment API made, and what it answers.
type Payment struct {
	PaymentID   string `json:"payment_id"`
	OrderID     string `json:"order_id"`
	AmountCents int    `json:"amount_cents"`
}

// paid is a line of the payment API's ledger: the payment, the
// Idempotency-Key it was made under and a digest of the request body.
type paid struct {
	Payment
	Key    string `json:"key"`
	Digest string `json:"digest"`
}

// Payments is a small payment API, standing for one that deduplicates by
// an Idempotency-Key of its own (as Stripe's does): POST /v1/refunds with a
// key refunds once per key, and answers every repeat with the first
// answer, marked Idempotent-Replayed. Its ledger is a file of JSON lines,
// synced before a refund is answered. GET /v1/refunds lists the refunds.
type Payments struct {
	mu    sync.Mutex // guards file and byKey, and orders the ledger's lines
	file  *os.File
	byKey map[string]paid
	order []string // keys, in the ledger's order
}

// OpenPayments opens the payment API's ledger at path, creating it.
func OpenPayments(path string) (*Payments, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	p := &Payments{file: f, byKey: map[string]paid{}}
	for dec := json.NewDecoder(f); ; {
		var line paid
		if err := dec.Decode(&line); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			// Lines are whole once synced; a torn one was never answered.
			break
		}
		p.byKey[line.Key] = line
		p.order = append(p.order, line.Key)
	}
	return p, nil
}

// Close closes the ledger.
func (p *Payments) Close() error { return p.file.Close() }

// List returns every refund made, in order.
func (p *Payments) List() []Payment {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Payment, len(p.order))
	for i, k := range p.order {
		out[i] = p.byKey[k].Payment
	}
	return out
}

// refund makes the refund asked for under key, or returns the one made
// under it before (replayed); conflict is true when key was used with
// another body.
func (p *Payments) refund(key string, body []byte) (pay Payment, replayed, conflict bool, err error) {
	sum := sha256.Sum256(body)
	digest := hex.EncodeToString(sum[:])
	p.mu.Lock()
	defer p.mu.Unlock()
	if prev, ok := p.byKey[key]; ok {
		return prev.Payment, true, prev.Digest != digest, nil
	}
	var in struct {
		OrderID     string `json:"order_id"`
		AmountCents int    `json:"amount_cents"`
	}
	if err := json.Unmarshal(body, &in); err != nil || in.OrderID == "" || in.AmountCents <= 0 {
		return Payment{}, false, false, errBadRefund
	}
	line := paid{Payment: Payment{PaymentID: "py_" + strconv.Itoa(len(p.order)+1), OrderID: in.OrderID,
		AmountCents: in.AmountCents}, Key: key, Digest: digest}
	b, _ := json.Marshal(line)
	if _, err := p.file.Write(append(b, '\n')); err != nil {
		return Payment{}, false, false, err
	}
	if err := p.file.Sync(); err != nil {
		return Payment{}, false, false, err
	}
	p.byKey[key] = line
	p.order = append(p.order, key)
	return line.Payment, false, false, nil
}

// ServeHTTP serves the payment API.
func (p *Payments) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.URL.Path == "/v1/refunds" && r.Method == http.MethodGet:
		_ = json.NewEncoder(w).Encode(map[string]any{"refunds": p.List()})
	case r.URL.Path == "/v1/refunds" && r.Method == http.MethodPost:
		key := r.Header.Get(idemhttp.HeaderKey)
		if strings.TrimSpace(key) == "" {
			http.Error(w, `{"error":"an Idempotency-Key header is required"}`, http.StatusBadRequest)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<16))
		if err != nil {
			http.Error(w, `{"error":"unreadable body"}`, http.StatusBadRequest)
			return
		}
		pay, replayed, conflict, err := p.refund(key, body)
		switch {
		case errors.Is(err, errBadRefund):
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
		case err != nil:
			http.Error(w, `{"error":"the ledger could not be written"}`, http.StatusInternalServerError)
		case conflict:
			http.Error(w, `{"error":"the Idempotency-Key was used with another request"}`, http.StatusUnprocessableEntity)
		default:
			if replayed {
				w.Header().Set(idemhttp.HeaderReplayed, "true")
			}
			_ = json.NewEncoder(w).Encode(pay)
		}
	default:
		http.NotFound(w, r)
	}
}

// runPayments serves the payment API until ctx ends, announcing its
// address on stderr.
func runPayments(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("payments", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var addr, ledger string
	fs.StringVar(&addr, "addr", "127.0.0.1:0", "address to listen on")
	fs.StringVar(&ledger, "ledger", "payments.jsonl", "the payment API's ledger file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	p, err := OpenPayments(ledger)
	if err != nil {
		return err
	}
	defer p.Close()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	log.New(stderr, "downstream-refunds: ", 0).Printf("payment API on http://%s", ln.Addr())
	srv := &http.Server{Handler: p}
	defer context.AfterFunc(ctx, func() { _ = srv.Close() })()
	if err = srv.Serve(ln); errors.Is(err, http.ErrServerClosed) {
		err = nil // ctx ended
	}
	return err
}
