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
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem/idemmcp"
	"github.com/idemkit/idem/idemproxy"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// idem mcp-proxy's end-to-end test: an MCP refund server (this test binary
// run as a child over stdio, on the official Go SDK) behind idem mcp-proxy
// (this test binary again, run by the client over stdio), driven by
// idemmcp.Client, with the upstream and the proxy SIGKILLed at the three
// points. The upstream's ledger holds one refund per key.

// mcpUpstreamEnv names the directory of the refund server's ledger and
// its fault file, when the test binary runs as the upstream.
const mcpUpstreamEnv = "IDEM_MCP_UPSTREAM"

// mcpFault is the upstream's fault file: SIGKILL once at At ("before",
// "acted") on Key's call.
type mcpFault struct{ At, Key string }

// TestMCPUpstream_Child is the refund server when the test binary runs as
// the upstream; it returns at once in any other process.
func TestMCPUpstream_Child(t *testing.T) {
	dir := os.Getenv(mcpUpstreamEnv)
	if dir == "" {
		return
	}
	_ = os.WriteFile(filepath.Join(dir, "upstream.pid"), []byte(fmt.Sprint(os.Getpid())), 0o600)
	srv := mcp.NewServer(&mcp.Implementation{Name: "refunds", Version: "7"}, nil)
	type refundIn struct {
		Order string `json:"order"`
		Cents int    `json:"cents"`
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "refund_order", Description: "Refund an order.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: new(bool)}},
		func(ctx context.Context, req *mcp.CallToolRequest, in refundIn) (*mcp.CallToolResult, any, error) {
			key, _ := req.Params.Meta[idemmcp.MetaKey].(string)
			killAt(dir, "before", key)
			f, err := os.OpenFile(filepath.Join(dir, "ledger"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
			if err != nil {
				return nil, nil, err
			}
			_, err = fmt.Fprintf(f, "%s %s %d\n", key, in.Order, in.Cents)
			if err == nil {
				err = f.Sync()
			}
			f.Close()
			if err != nil {
				return nil, nil, err
			}
			killAt(dir, "acted", key)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "refunded " + in.Order}}}, nil, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "get_order", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *mcp.CallToolRequest, in refundIn) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "order " + in.Order}}}, nil, nil
		})
	_ = srv.Run(context.Background(), &mcp.StdioTransport{})
	os.Exit(0)
}

// killAt SIGKILLs the upstream once if its fault file says so.
func killAt(dir, point, key string) {
	b, err := os.ReadFile(filepath.Join(dir, "fault.json"))
	var f mcpFault
	if err != nil || json.Unmarshal(b, &f) != nil || f.At != point || f.Key != key {
		return
	}
	mark, err := os.OpenFile(filepath.Join(dir, "killed-"+key), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return
	}
	mark.Close()
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

// mcpRig is the proxy's store and the upstream's directory.
type mcpRig struct {
	dir, store, resolver string
	mu                   sync.Mutex
	killAt               string       // the next proxy's -kill-at
	proxy                *exec.Cmd    // the proxy process in use
	log                  lockedBuffer // every proxy's stderr
}

// ledger counts the refunds per key.
func (r *mcpRig) ledger(t *testing.T) map[string]int {
	b, err := os.ReadFile(filepath.Join(r.dir, "ledger"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if k, _, ok := strings.Cut(line, " "); ok {
			n[k]++
		}
	}
	return n
}

// connect starts idem mcp-proxy over stdio in front of the upstream.
func (r *mcpRig) connect(ctx context.Context) (*mcp.ClientSession, error) {
	r.mu.Lock()
	args := []string{"mcp-proxy", r.store, "-resolver", r.resolver, "-recovery-grace", "300ms"}
	if r.killAt != "" {
		// Only the first proxy started after the fault was set dies.
		args = append(args, "-kill-at", r.killAt)
		r.killAt = ""
	}
	args = append(args, "--", os.Args[0], "-test.run=^TestMCPUpstream_Child$", "-test.count=1")
	cmd := exec.Command(os.Args[0], "-test.run=^TestProxyCommand_Child$", "-test.count=1")
	cmd.Env = append(os.Environ(), proxyChildEnv+"="+strings.Join(args, "\x1f"), mcpUpstreamEnv+"="+r.dir)
	cmd.Stderr = &r.log
	// Its own process group, so that the test's end stops the upstream
	// children it starts too (each client session starts one).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	r.proxy = cmd
	r.mu.Unlock()
	client := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "1"}, nil)
	return client.Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: 5 * time.Second}, nil)
}

// mcpResolver answers from the upstream's ledger: a line with the key is
// committed (with the answer the tool gives), none is not committed.
func (r *mcpRig) mcpResolver(t *testing.T) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var q idemproxy.ResolveRequest
		if err := json.NewDecoder(req.Body).Decode(&q); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		b, _ := os.ReadFile(filepath.Join(r.dir, "ledger"))
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) == 3 && f[0] == q.Key {
				saved, _ := idemmcp.SavedResult(&mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "refunded " + f[1]}}})
				_ = json.NewEncoder(w).Encode(idemproxy.ResolveAnswer{Verdict: "committed", Body: string(saved.Body)})
				return
			}
		}
		_ = json.NewEncoder(w).Encode(idemproxy.ResolveAnswer{Verdict: "not_committed"})
	}))
}

// textOfResult joins a result's text.
func textOfResult(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func TestMCPProxyCommand_Kills(t *testing.T) {
	tmp := t.TempDir()
	r := &mcpRig{dir: tmp, store: filepath.Join(tmp, "store")}
	res := r.mcpResolver(t)
	defer res.Close()
	r.resolver = res.URL
	ctx := context.Background()
	client := &idemmcp.Client{Connect: r.connect, MaxAttempts: 10, BaseDelay: 20 * time.Millisecond,
		MaxDelay: 200 * time.Millisecond}
	t.Cleanup(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.proxy != nil && r.proxy.Process != nil {
			_ = syscall.Kill(-r.proxy.Process.Pid, syscall.SIGKILL)
		}
	})

	// The proxy offers the upstream's tools, annotations included, and
	// passes the read-only one through.
	sess, err := r.connect(ctx)
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, r.log.String())
	}
	tools, err := sess.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(tools.Tools) != 2 || sess.InitializeResult().ServerInfo.Name != "refunds" {
		t.Fatalf("tools %v, server %v", tools.Tools, sess.InitializeResult().ServerInfo)
	}
	for _, tool := range tools.Tools {
		if tool.Name == "get_order" && (tool.Annotations == nil || !tool.Annotations.ReadOnlyHint) {
			t.Errorf("get_order lost its readOnlyHint: %+v", tool.Annotations)
		}
	}
	for range 2 {
		got, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "get_order", Arguments: map[string]any{"order": "o-1", "cents": 0}})
		if err != nil || got.IsError || idemmcp.Replayed(got) {
			t.Fatalf("get_order: %v %+v %s", err, got, textOfResult(got))
		}
	}
	if got, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "refund_order", Arguments: map[string]any{"order": "o-1", "cents": 5}}); err != nil ||
		got.Meta[idemmcp.MetaStatus] != idemmcp.StatusMissingKey {
		t.Fatalf("refund_order without a key: %v %+v", err, got)
	}
	sess.Close()

	type fault struct{ who, point string }
	faults := []fault{{"", ""}, {"upstream", "before"}, {"upstream", "acted"}, {"upstream", "answered"},
		{"proxy", string(idemproxy.PointClaimed)}, {"proxy", string(idemproxy.PointUpstreamAnswered)}, {"proxy", "answered"}}
	firsts := map[string]string{}
	for i, f := range faults {
		key := fmt.Sprintf("k%d-%s-%s", i, f.who, f.point)
		order := fmt.Sprintf("o-%d", i)
		switch {
		case f.who == "upstream" && f.point != "answered":
			b, _ := json.Marshal(mcpFault{At: f.point, Key: key})
			if err := os.WriteFile(filepath.Join(tmp, "fault.json"), b, 0o600); err != nil {
				t.Fatal(err)
			}
		case f.who == "proxy" && f.point != "answered":
			// The proxy in use stops; the client's next call starts one
			// that dies at the point.
			r.mu.Lock()
			r.killAt = f.point
			_ = r.proxy.Process.Kill()
			r.mu.Unlock()
		}
		var got *mcp.CallToolResult
		for attempt := 0; ; attempt++ {
			got, err = client.CallTool(ctx, &mcp.CallToolParams{Name: "refund_order",
				Arguments: map[string]any{"order": order, "cents": 500}}, key)
			if err == nil && !got.IsError {
				break
			}
			if attempt == 40 {
				t.Fatalf("%s killed at %s: %v %+v\n%s", f.who, f.point, err, got, r.log.String())
			}
			if err == nil && got.Meta[idemmcp.MetaStatus] == idemmcp.StatusOutcomeUnknown {
				// Held within its recovery grace: come back a little later.
				time.Sleep(100 * time.Millisecond)
			}
		}
		firsts[key] = textOfResult(got)
		switch {
		case f.who == "upstream" && f.point == "answered":
			pid, _ := os.ReadFile(filepath.Join(tmp, "upstream.pid"))
			var n int
			fmt.Sscan(string(pid), &n)
			_ = syscall.Kill(n, syscall.SIGKILL)
		case f.who == "proxy" && f.point == "answered":
			r.mu.Lock()
			_ = r.proxy.Process.Kill()
			r.mu.Unlock()
		}
	}
	for key, first := range firsts {
		got, err := client.CallTool(ctx, &mcp.CallToolParams{Name: "refund_order",
			Arguments: map[string]any{"order": "o-" + strings.TrimPrefix(strings.SplitN(key, "-", 2)[0], "k"), "cents": 500}}, key)
		if err != nil || textOfResult(got) != first || !idemmcp.Replayed(got) {
			t.Errorf("%s again: %v %q (replayed %v), want %q replayed", key, err, textOfResult(got), got != nil && idemmcp.Replayed(got), first)
		}
	}
	per := r.ledger(t)
	for key := range firsts {
		if per[key] != 1 {
			t.Errorf("key %s: %d refunds in the ledger, want 1", key, per[key])
		}
	}
	if len(per) != len(firsts) {
		t.Errorf("the ledger: %v", per)
	}
	t.Logf("the proxies' log:\n%s", r.log.String())
}

// TestMCPProxyCommand_Example runs the first example of idem mcp-proxy -h,
// its command replaced by the test's refund server: the client lists the
// upstream's tools through it, and a keyed call replays.
func TestMCPProxyCommand_Example(t *testing.T) {
	tmp := t.TempDir()
	ex := examples(t, "mcp-proxy")[0]
	words := shellWords(strings.NewReplacer("/var/lib/refund-tool/idem", filepath.Join(tmp, "store"),
		"node server.js", os.Args[0]+" -test.run=^TestMCPUpstream_Child$ -test.count=1").Replace(ex))
	cmd := exec.Command(os.Args[0], "-test.run=^TestProxyCommand_Child$", "-test.count=1")
	cmd.Env = append(os.Environ(), proxyChildEnv+"="+strings.Join(words[1:], "\x1f"), mcpUpstreamEnv+"="+tmp)
	var log lockedBuffer
	cmd.Stderr = &log
	ctx := context.Background()
	sess, err := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "1"}, nil).Connect(ctx,
		&mcp.CommandTransport{Command: cmd, TerminateDuration: 5 * time.Second}, nil)
	if err != nil {
		t.Fatalf("%q: %v\n%s", words, err, log.String())
	}
	defer sess.Close()
	client := &idemmcp.Client{Session: sess}
	var texts []string
	for range 2 {
		got, err := client.CallTool(ctx, &mcp.CallToolParams{Name: "refund_order",
			Arguments: map[string]any{"order": "o-9", "cents": 900}}, "refund:o-9")
		if err != nil || got.IsError {
			t.Fatalf("refund_order: %v %+v\n%s", err, got, log.String())
		}
		texts = append(texts, fmt.Sprintf("%s replayed=%v", textOfResult(got), idemmcp.Replayed(got)))
	}
	if texts[0] != "refunded o-9 replayed=false" || texts[1] != "refunded o-9 replayed=true" {
		t.Fatalf("calls: %q", texts)
	}
}

// headerTransport adds a header to every request, as a gateway would.
type headerTransport struct{ name, value string }

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(h.name, h.value)
	return http.DefaultTransport.RoundTrip(r)
}

// TestMCPProxyCommand_StreamableHTTP puts idem mcp-proxy between a
// streamable HTTP upstream and clients over streamable HTTP, scoped by a
// header: a tenant's repeat replays, another tenant's call runs, a call
// without the header is refused.
func TestMCPProxyCommand_StreamableHTTP(t *testing.T) {
	var runs atomic.Int64
	up := mcp.NewServer(&mcp.Implementation{Name: "refunds-http", Version: "1"}, nil)
	mcp.AddTool(up, &mcp.Tool{Name: "refund_order"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprint("refund ", runs.Add(1))}}}, nil, nil
	})
	upSrv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return up }, nil))
	t.Cleanup(upSrv.Close) // after the proxy stopped: its session holds a stream open
	sp := serveCommand(t, "mcp-proxy", t.TempDir(), "-listen", "127.0.0.1:0", "-scope", "header:X-Tenant",
		"-upstream", upSrv.URL)
	ctx := context.Background()
	connect := func(tenant string) *mcp.ClientSession {
		hc := &http.Client{Transport: http.DefaultTransport}
		if tenant != "" {
			hc.Transport = headerTransport{"X-Tenant", tenant}
		}
		sess, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil).Connect(ctx,
			&mcp.StreamableClientTransport{Endpoint: sp.base, HTTPClient: hc}, nil)
		if err != nil {
			t.Fatalf("connect: %v\n%s", err, sp.logged())
		}
		t.Cleanup(func() { sess.Close() })
		return sess
	}
	call := func(sess *mcp.ClientSession) *mcp.CallToolResult {
		t.Helper()
		res, err := (&idemmcp.Client{Session: sess}).CallTool(ctx, &mcp.CallToolParams{Name: "refund_order",
			Arguments: map[string]any{}}, "k-1")
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	acme := connect("acme")
	if sess := acme.InitializeResult(); sess.ServerInfo.Name != "refunds-http" {
		t.Fatalf("server %+v", sess.ServerInfo)
	}
	first, again := call(acme), call(acme)
	if textOfResult(first) != "refund 1" || textOfResult(again) != "refund 1" || !idemmcp.Replayed(again) {
		t.Fatalf("acme: %q then %q", textOfResult(first), textOfResult(again))
	}
	if other := call(connect("globex")); textOfResult(other) != "refund 2" || idemmcp.Replayed(other) {
		t.Fatalf("globex: %q", textOfResult(other))
	}
	if none := call(connect("")); none.Meta[idemmcp.MetaStatus] != idemmcp.StatusUnauthenticated {
		t.Fatalf("no tenant: %+v %q", none.Meta, textOfResult(none))
	}
	if runs.Load() != 2 {
		t.Fatalf("upstream ran %d times, want 2", runs.Load())
	}
}

// TestMCPProxyCommand_Plain runs idem mcp-proxy -plain, without a store:
// a keyed call's repeat runs again, as without the proxy.
func TestMCPProxyCommand_Plain(t *testing.T) {
	var runs atomic.Int64
	up := mcp.NewServer(&mcp.Implementation{Name: "refunds-plain", Version: "1"}, nil)
	mcp.AddTool(up, &mcp.Tool{Name: "refund_order"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprint("refund ", runs.Add(1))}}}, nil, nil
	})
	upSrv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return up }, nil))
	t.Cleanup(upSrv.Close)
	sp := serveCommand(t, "mcp-proxy", "-plain", "-listen", "127.0.0.1:0", "-upstream", upSrv.URL)
	ctx := context.Background()
	sess, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: sp.base}, nil)
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, sp.logged())
	}
	defer sess.Close()
	for i := range 2 {
		res, err := (&idemmcp.Client{Session: sess}).CallTool(ctx, &mcp.CallToolParams{Name: "refund_order",
			Arguments: map[string]any{}}, "k-1")
		if err != nil || idemmcp.Replayed(res) || textOfResult(res) != fmt.Sprint("refund ", i+1) {
			t.Fatalf("call %d: %v %q replayed=%v", i+1, err, textOfResult(res), res != nil && idemmcp.Replayed(res))
		}
	}
}
