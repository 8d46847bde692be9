package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemmcp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Both proxies with -keys: a first call and its replay go through the
// proxy over an encrypted store, the replay again after a restart (read
// from disk, opened with the key), and no file of the store holds the
// upstream's answer in clear. The same calls without -keys leave it in
// the store's files, which shows the search finds it.

// proxyCall is one call through a proxy at base with key: the answer's
// text and whether it was a replay.
type proxyCall func(t *testing.T, base, key string) (text string, replayed bool)

func TestProxyCommands_Keys(t *testing.T) {
	httpUp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"refund":%q}`, secretMarker)
	}))
	t.Cleanup(httpUp.Close)
	var mcpRuns atomic.Int64
	mcpSrv := mcp.NewServer(&mcp.Implementation{Name: "refunds", Version: "1"}, nil)
	mcp.AddTool(mcpSrv, &mcp.Tool{Name: "refund_order"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		mcpRuns.Add(1)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "refunded " + secretMarker}}}, nil, nil
	})
	mcpUp := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return mcpSrv }, nil))
	t.Cleanup(mcpUp.Close) // after the proxies stopped: their sessions hold a stream open

	httpCall := func(t *testing.T, base, key string) (string, bool) {
		resp, body := send(t, base+"/refunds", `{"order":"o-1"}`, "Idempotency-Key", key)
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		return body, resp.Header.Get(idemhttp.HeaderReplayed) == "true"
	}
	mcpCall := func(t *testing.T, base, key string) (string, bool) {
		ctx := context.Background()
		sess, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil).Connect(ctx,
			&mcp.StreamableClientTransport{Endpoint: base}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer sess.Close()
		res, err := (&idemmcp.Client{Session: sess}).CallTool(ctx, &mcp.CallToolParams{Name: "refund_order",
			Arguments: map[string]any{}}, key)
		if err != nil || res.IsError {
			t.Fatalf("refund_order: %v %+v", err, res)
		}
		return textOfResult(res), idemmcp.Replayed(res)
	}
	for _, c := range []struct {
		name string
		args []string
		call proxyCall
	}{
		{"proxy", []string{"-listen", "127.0.0.1:0", "-scope", "shared", "-upstream", httpUp.URL}, httpCall},
		{"mcp-proxy", []string{"-listen", "127.0.0.1:0", "-scope", "shared", "-upstream", mcpUp.URL}, mcpCall},
	} {
		for _, encrypted := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/encrypted=%v", c.name, encrypted), func(t *testing.T) {
				dir := filepath.Join(t.TempDir(), "store")
				args := append([]string{dir}, c.args...)
				if encrypted {
					args = append(args, "-keys", writeKey(t, t.TempDir(), "k1", 7))
				}
				sp := serveCommand(t, c.name, args...)
				first, firstReplayed := c.call(t, sp.base, "k-1")
				again, againReplayed := c.call(t, sp.base, "k-1")
				if firstReplayed || !againReplayed || again != first {
					t.Fatalf("first %q (replayed %v), again %q (replayed %v)", first, firstReplayed, again, againReplayed)
				}
				if code := sp.stop(); code != 0 {
					t.Fatalf("exit %d: %s", code, sp.logged())
				}
				leaked := storeDirLeaks(t, dir)
				if encrypted && len(leaked) > 0 {
					t.Fatalf("the answer is in clear in %v", leaked)
				}
				if !encrypted {
					if len(leaked) == 0 {
						t.Fatal("without -keys the search finds no answer in the store: it proves nothing")
					}
					return
				}
				// Opened again with the key, the proxy replays the
				// sealed answer from disk.
				sp = serveCommand(t, c.name, args...)
				if later, replayed := c.call(t, sp.base, "k-1"); later != first || !replayed {
					t.Fatalf("after a restart: %q (replayed %v), want %q replayed", later, replayed, first)
				}
			})
		}
	}
	if mcpRuns.Load() != 2 {
		t.Fatalf("the MCP upstream ran %d times, want once per store", mcpRuns.Load())
	}
}
