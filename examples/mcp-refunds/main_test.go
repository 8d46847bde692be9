package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/idemmcp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// childEnv makes the test binary run the server instead of the tests, so
// that a crash test kills a real process serving over stdio.
const childEnv = "MCP_REFUNDS_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		if err := run(context.Background(), os.Args[1:], os.Stderr); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// child is one server process over stdio.
type child struct {
	cmd     *exec.Cmd
	blocked chan struct{} // closed when the server says it blocked
}

// startChild returns a command transport for a server process on dir, and
// the child it will start; block is its -test-block stage ("" for none).
func startChild(t *testing.T, dir, block string) (*mcp.CommandTransport, *child) {
	t.Helper()
	args := []string{"-dir", dir}
	if block != "" {
		args = append(args, "-test-block", block)
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, blocked: make(chan struct{})}
	go func() {
		var once sync.Once
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "blocked "+block) {
				once.Do(func() { close(c.blocked) })
			}
		}
	}()
	t.Cleanup(func() {
		if cmd.Process != nil {
			_ = cmd.Process.Kill()
		}
	})
	return &mcp.CommandTransport{Command: cmd, TerminateDuration: 5 * time.Second}, c
}

// TestCrash_RetryAfterSIGKILL kills the server with SIGKILL while a refund
// is running, before or after it reached the ledger, restarts it and
// retries with the same key: the refund happens exactly once, and the
// retry gets its answer.
func TestCrash_RetryAfterSIGKILL(t *testing.T) {
	for _, stage := range []string{"before-ledger", "after-ledger"} {
		t.Run(stage, func(t *testing.T) {
			dir := t.TempDir()
			var (
				mu       sync.Mutex // guards children
				children []*child
				first    = make(chan *child, 1)
			)
			client := &idemmcp.Client{Jitter: func(time.Duration) time.Duration { return 0 },
				Connect: func(ctx context.Context) (*mcp.ClientSession, error) {
					mu.Lock()
					block := ""
					if len(children) == 0 {
						block = stage // only the first server blocks
					}
					tr, c := startChild(t, dir, block)
					children = append(children, c)
					if len(children) == 1 {
						first <- c
					}
					mu.Unlock()
					return mcp.NewClient(&mcp.Implementation{Name: "crash-test", Version: "v0"}, nil).Connect(ctx, tr, nil)
				}}

			defer client.Close()
			type answer struct {
				res *mcp.CallToolResult
				err error
			}
			done := make(chan answer, 1)
			go func() {
				res, err := client.CallTool(context.Background(), &mcp.CallToolParams{Name: "refund_order",
					Arguments: map[string]any{"order_id": "o-42", "amount_cents": 4200}}, "refund:o-42")
				done <- answer{res, err}
			}()

			victim := <-first
			<-victim.blocked // the refund is running, stopped at stage
			if err := victim.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			a := <-done
			if a.err != nil {
				t.Fatalf("retry after the kill: %v", a.err)
			}
			got := refundOf(t, a.res)
			if got.OrderID != "o-42" || got.AmountCents != 4200 || got.RefundID != "re_1" {
				t.Fatalf("answer %+v", got)
			}
			// After the ledger, the refund had happened: the retry replays
			// it (the Resolver found it). Before, it had not: the retry ran it.
			if want := stage == "after-ledger"; idemmcp.Replayed(a.res) != want {
				t.Fatalf("replayed=%t, want %t", idemmcp.Replayed(a.res), want)
			}
			// The answer the Resolver saved has no time of its own: the
			// replay gives when the record was first claimed.
			if _, ok := idemmcp.FirstRunAt(a.res); ok != idemmcp.Replayed(a.res) {
				t.Fatalf("first run time %v on a result replayed=%t", a.res.Meta[idemmcp.MetaFirstRunAt], idemmcp.Replayed(a.res))
			}
			if n := countRefunds(t, client); n != 1 {
				t.Fatalf("list_refunds shows %d refunds, want 1", n)
			}
		})
	}
}

func countRefunds(t *testing.T, client *idemmcp.Client) int {
	t.Helper()
	res, err := client.CallTool(context.Background(), &mcp.CallToolParams{Name: "list_refunds"}, "list")
	if err != nil || res.IsError {
		t.Fatalf("list_refunds: %v", err)
	}
	var list RefundList
	decode(t, res.StructuredContent, &list)
	return len(list.Refunds)
}

func refundOf(t *testing.T, res *mcp.CallToolResult) Refund {
	t.Helper()
	if res.IsError {
		t.Fatalf("tool error: %+v", res.Content)
	}
	var r Refund
	decode(t, res.StructuredContent, &r)
	return r
}

func decode(t *testing.T, v any, out any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
}

// TestHTTP serves the example over streamable HTTP on 127.0.0.1, as
// -http does, and calls refund_order twice with one key.
func TestHTTP(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"-dir", t.TempDir(), "-http", ":0"}, pw) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	sc := bufio.NewScanner(pr)
	if !sc.Scan() || !strings.Contains(sc.Text(), "http://127.0.0.1:") {
		t.Fatalf("no address announced: %q", sc.Text())
	}
	url := sc.Text()[strings.Index(sc.Text(), "http://"):]
	go func() { _, _ = io.Copy(io.Discard, pr) }()

	client := &idemmcp.Client{Connect: func(ctx context.Context) (*mcp.ClientSession, error) {
		return mcp.NewClient(&mcp.Implementation{Name: "http-test", Version: "v0"}, nil).
			Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, nil)
	}}
	defer client.Close()
	var answers []*mcp.CallToolResult
	for range 2 {
		res, err := client.CallTool(ctx, &mcp.CallToolParams{Name: "refund_order",
			Arguments: map[string]any{"order_id": "o-1", "amount_cents": 100}}, "refund:o-1")
		if err != nil {
			t.Fatal(err)
		}
		answers = append(answers, res)
	}
	if refundOf(t, answers[1]) != refundOf(t, answers[0]) || !idemmcp.Replayed(answers[1]) {
		t.Fatalf("second answer %+v replayed=%t", refundOf(t, answers[1]), idemmcp.Replayed(answers[1]))
	}
	if n := countRefunds(t, client); n != 1 {
		t.Fatalf("list_refunds shows %d refunds, want 1", n)
	}
}
