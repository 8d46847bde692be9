package idemmcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/idemmcp"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// serveHTTP serves h on 127.0.0.1 over real TCP, with net/http's abort
// logs discarded.
func serveHTTP(t testing.TB, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// dropFirstToolResponse runs the first POST that carries a tools/call to
// the end, then aborts the connection instead of sending its response: the
// tool ran, its answer is lost.
func dropFirstToolResponse(h http.Handler, dropped *atomic.Bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || dropped.Load() {
			h.ServeHTTP(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		var msg struct{ Method string }
		if json.Unmarshal(body, &msg) != nil || msg.Method != "tools/call" || !dropped.CompareAndSwap(false, true) {
			h.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(httptest.NewRecorder(), r)
		panic(http.ErrAbortHandler)
	})
}

func TestStreamableHTTP_LostResponseReplays(t *testing.T) {
	r := &refunds{}
	s := newServer(shared(t, nil), r)
	var dropped atomic.Bool
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	srv := serveHTTP(t, dropFirstToolResponse(idemmcp.TopLevelKeysHTTP(handler), &dropped))

	var connects atomic.Int32
	c := &idemmcp.Client{Clock: newStepClock(), Connect: func(ctx context.Context) (*mcp.ClientSession, error) {
		connects.Add(1)
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "v0"}, nil).
			Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL, MaxRetries: -1}, nil)
		if err == nil {
			t.Cleanup(func() { _ = cs.Close() })
		}
		return cs, err
	}}
	res, err := c.CallTool(context.Background(), &mcp.CallToolParams{Name: "refund_order",
		Arguments: map[string]any{"order_id": "o-7", "amount_cents": 700}}, "refund:o-7")
	if err != nil {
		t.Fatal(err)
	}
	if !dropped.Load() || !idemmcp.Replayed(res) || refundOf(t, res) != (refundOut{"re_1", "o-7", 700}) || r.count() != 1 {
		t.Fatalf("dropped=%t replayed=%t refund=%+v runs=%d connects=%d", dropped.Load(), idemmcp.Replayed(res),
			refundOf(t, res), r.count(), connects.Load())
	}
}

// TestStreamableHTTP_PrincipalNotToken scopes by the bearer's user id: a
// rotated token of the same user replays, another user runs.
func TestStreamableHTTP_PrincipalNotToken(t *testing.T) {
	r := &refunds{}
	s := newServer(idemmcp.New(newStore(t, nil), &idemmcp.Options{Authenticated: true}), r)
	users := map[string]string{"alice-token-1": "alice", "alice-token-2": "alice", "bob-token": "bob"}
	verify := func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		user, ok := users[token]
		if !ok {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{UserID: user, Expiration: time.Now().Add(time.Hour)}, nil
	}
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	srv := serveHTTP(t, auth.RequireBearerToken(verify, nil)(handler))

	callAs := func(token string) *mcp.CallToolResult {
		t.Helper()
		client := &http.Client{Transport: bearer{token}}
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "v0"}, nil).
			Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: client}, nil)
		if err != nil {
			t.Fatalf("connect with %s: %v", token, err)
		}
		defer cs.Close()
		return call(t, cs, "k", "o-1", 5)
	}
	callAs("alice-token-1")
	if res := callAs("alice-token-2"); !idemmcp.Replayed(res) || r.count() != 1 {
		t.Fatalf("alice with a rotated token: replayed=%t runs=%d", idemmcp.Replayed(res), r.count())
	}
	if res := callAs("bob-token"); idemmcp.Replayed(res) || r.count() != 2 {
		t.Fatalf("bob: replayed=%t runs=%d", idemmcp.Replayed(res), r.count())
	}
}

type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// TestTopLevelKeysHTTP posts tools/call in the SEP-3182 shape, the key at
// the top of params, to a stateless streamable HTTP server.
func TestTopLevelKeysHTTP(t *testing.T) {
	for _, lift := range []bool{false, true} {
		r := &refunds{}
		s := newServer(shared(t, nil), r)
		var handler http.Handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s },
			&mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true})
		if lift {
			handler = idemmcp.TopLevelKeysHTTP(handler)
		}
		srv := serveHTTP(t, handler)
		postTopLevel(t, srv.URL, 1)
		res := postTopLevel(t, srv.URL, 2)
		meta, _ := res["_meta"].(map[string]any)
		switch {
		case lift && (meta[idemmcp.MetaReplayed] != true || r.count() != 1):
			t.Fatalf("lifted: second post %v, runs=%d", res, r.count())
		case !lift && meta[idemmcp.MetaStatus] != idemmcp.StatusMissingKey:
			t.Fatalf("not lifted: the key was read anyway: %v", res)
		}
	}
}

// postTopLevel posts one tools/call of refund_order with its key at the
// top of params, and returns the JSON-RPC result.
func postTopLevel(t *testing.T, url string, id int) map[string]any {
	t.Helper()
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"refund_order",`+
		`"arguments":{"order_id":"o-1","amount_cents":5},"idempotencyKey":"top-1"}}`, id)
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var msg struct {
		Result map[string]any `json:"result"`
	}
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &msg); err != nil || msg.Result == nil {
		t.Fatalf("status %d, body %s: %v", resp.StatusCode, b, err)
	}
	return msg.Result
}
