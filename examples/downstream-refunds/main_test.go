package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemmcp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// serverEnv makes the test binary run the command instead of the tests:
// the tool server the crash test kills is a real process.
const serverEnv = "DOWNSTREAM_REFUNDS_RUN"

func TestMain(m *testing.M) {
	if os.Getenv(serverEnv) != "1" {
		os.Exit(m.Run())
	}
	// The child: the command itself, as main runs it.
	code := 0
	if err := run(context.Background(), os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "downstream-refunds:", err)
		code = 1
	}
	os.Exit(code)
}

// stageWatch is a tool server's stderr: it closes reached once the server
// says it blocked at its stage.
type stageWatch struct {
	mu      sync.Mutex // guards seen
	seen    strings.Builder
	stage   string
	reached chan struct{}
	once    sync.Once
}

func (w *stageWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen.Write(p)
	if w.stage != "" && strings.Contains(w.seen.String(), "blocked "+w.stage) {
		w.once.Do(func() { close(w.reached) })
	}
	return len(p), nil
}

// toolServer starts the tool server as a child process over stdio and
// returns a session with it, and the child, killed when the test ends.
func toolServer(t *testing.T, dir, payments, block string) (*mcp.ClientSession, *exec.Cmd, *stageWatch) {
	t.Helper()
	args := []string{"serve", "-dir", dir, "-payments", payments}
	if block != "" {
		args = append(args, "-test-block", block)
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), serverEnv+"=1")
	watch := &stageWatch{stage: block, reached: make(chan struct{})}
	cmd.Stderr = watch
	t.Cleanup(func() {
		if cmd.Process != nil {
			_ = cmd.Process.Kill()
		}
	})
	client := mcp.NewClient(&mcp.Implementation{Name: "downstream-test", Version: "v0"}, nil)
	cs, err := client.Connect(context.Background(), &mcp.CommandTransport{Command: cmd, TerminateDuration: 5 * time.Second}, nil)
	if err != nil {
		t.Fatalf("connect to the tool server: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs, cmd, watch
}

// countingAPI is the payment API, counting the refund requests per
// Idempotency-Key it was sent. If paid is set, the first refund is made
// but not answered: paid is closed, and the answer waits until the
// caller is gone.
type countingAPI struct {
	*Payments
	mu   sync.Mutex // guards sent
	sent map[string]int
	paid chan struct{}
}

func (c *countingAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		c.Payments.ServeHTTP(w, r)
		return
	}
	c.mu.Lock()
	c.sent[r.Header.Get(idemhttp.HeaderKey)]++
	first := len(c.sent) == 1 && c.sent[r.Header.Get(idemhttp.HeaderKey)] == 1
	c.mu.Unlock()
	if c.paid == nil || !first {
		c.Payments.ServeHTTP(w, r)
		return
	}
	c.Payments.ServeHTTP(httptest.NewRecorder(), r) // the refund is made
	close(c.paid)
	<-r.Context().Done() // the tool server died waiting for the answer
}

func refundCall(key string) *mcp.CallToolParams {
	return idemmcp.WithKey(&mcp.CallToolParams{Name: "refund_order",
		Arguments: map[string]any{"order_id": "o-7", "amount_cents": 700}}, key)
}

// TestCrash_SIGKILLAroundThePayment kills the tool server with SIGKILL
// while refund_order runs, before or after the payment API made the
// refund or while its answer is on the way, and before the outcome was
// recorded. A new tool server process
// gets the retry: its Resolver answers "not committed", the refund runs
// again with the same downstream key, and the payment API records one
// refund however the crash fell.
func TestCrash_SIGKILLAroundThePayment(t *testing.T) {
	for _, stage := range []string{"before-payment", "during-payment", "after-payment"} {
		t.Run(stage, func(t *testing.T) {
			dir := t.TempDir()
			p, err := OpenPayments(filepath.Join(dir, "payments.jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			api := &countingAPI{Payments: p, sent: map[string]int{}}
			srv := httptest.NewServer(api) // a real HTTP server on 127.0.0.1
			defer srv.Close()
			store := filepath.Join(dir, "tool")

			block, reached := stage, make(<-chan struct{})
			if stage == "during-payment" {
				api.paid = make(chan struct{})
				block, reached = "", api.paid
			}
			cs, victim, watch := toolServer(t, store, srv.URL, block)
			if block != "" {
				reached = watch.reached
			}
			failed := make(chan error, 1)
			go func() {
				_, err := cs.CallTool(context.Background(), refundCall("refund:o-7"))
				failed <- err
			}()
			select {
			case <-reached:
			case <-time.After(time.Minute):
				t.Fatalf("the tool server never reached %s", stage)
			}
			if err := victim.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			if err := <-failed; err == nil {
				t.Fatal("the call to a killed server succeeded")
			}

			cs, _, _ = toolServer(t, store, srv.URL, "")
			res, err := cs.CallTool(context.Background(), refundCall("refund:o-7"))
			if err != nil || res.IsError {
				t.Fatalf("retry after the kill: %v %+v", err, res)
			}
			// The claim was released by recovery: the tool ran again.
			if idemmcp.Replayed(res) {
				t.Fatal("the retry was replayed; recovery should have answered not committed")
			}
			// The SDK sends a typed tool's output as text content too.
			var got Refund
			if text, ok := res.Content[0].(*mcp.TextContent); !ok || json.Unmarshal([]byte(text.Text), &got) != nil {
				t.Fatalf("answer %+v", res.Content)
			}
			if got.PaymentID != "py_1" || got.OrderID != "o-7" || got.AmountCents != 700 {
				t.Fatalf("answer %+v", got)
			}
			if list := p.List(); len(list) != 1 {
				t.Fatalf("the payment API recorded %d refunds, want 1: %+v", len(list), list)
			}
			want := map[string]int{got.DownstreamKey: 1}
			if stage != "before-payment" {
				want[got.DownstreamKey] = 2 // the second request was deduplicated
			}
			api.mu.Lock()
			sent := api.sent
			api.mu.Unlock()
			if len(sent) != 1 || sent[got.DownstreamKey] != want[got.DownstreamKey] {
				t.Fatalf("refund requests per key %v, want %v", sent, want)
			}

			// A further repeat is replayed by the tool server, with the time
			// of the run whose answer it is.
			again, err := cs.CallTool(context.Background(), refundCall("refund:o-7"))
			if _, ok := idemmcp.FirstRunAt(again); err != nil || !idemmcp.Replayed(again) || !ok {
				t.Fatalf("repeat: %v replayed=%t meta=%v", err, idemmcp.Replayed(again), again.Meta)
			}
		})
	}
}
