package idemproxy_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemproxy"
)

func TestProxy_ServeHTTP_Replay(t *testing.T) {
	var up refunds
	px := newProxy(t, newStore(t, nil), newServer(t, &up).URL, nil)

	first, body1 := post(t, px, "k1", "acme", `{"order":"o-1","cents":500}`)
	again, body2 := post(t, px, "k1", "acme", `{"cents":500, "order":"o-1"}`)
	if first.StatusCode != http.StatusCreated || again.StatusCode != http.StatusCreated {
		t.Fatalf("statuses %d and %d, want 201 twice", first.StatusCode, again.StatusCode)
	}
	if body1 != body2 || again.Header.Get(idemhttp.HeaderReplayed) != "true" {
		t.Fatalf("repeat not replayed: %q then %q (%v)", body1, body2, again.Header)
	}
	if got := up.n.Load(); got != 1 {
		t.Fatalf("upstream ran %d times, want 1", got)
	}
	// Another tenant's key is another record.
	if resp, _ := post(t, px, "k1", "globex", `{"order":"o-1","cents":500}`); resp.Header.Get(idemhttp.HeaderReplayed) != "" {
		t.Fatal("a key replayed across tenants")
	}
	if resp, _ := post(t, px, "k1", "acme", `{"order":"o-1","cents":900}`); resp.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("changed payload: status %d, want 422", resp.StatusCode)
	}
	if got := up.n.Load(); got != 2 {
		t.Fatalf("upstream ran %d times, want 2", got)
	}
}

func TestProxy_ServeHTTP_MissingScope(t *testing.T) {
	var up refunds
	px := newProxy(t, newStore(t, nil), newServer(t, &up).URL, nil)
	resp, body := post(t, px, "k1", "", `{}`)
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, idemhttp.ProblemInvalidScope) {
		t.Fatalf("no scope header: %d %s, want 401 invalid-scope", resp.StatusCode, body)
	}
	if up.n.Load() != 0 {
		t.Fatal("the upstream ran without a scope")
	}
}

func TestProxy_ServeHTTP_PassThrough(t *testing.T) {
	var up refunds
	px := newProxy(t, newStore(t, nil), newServer(t, &up).URL, func(o *idemproxy.Options) {
		o.Pass = []string{"/search"}
	})
	post(t, px, "", "acme", `{}`)
	post(t, px, "", "acme", `{}`)
	for range 2 {
		resp, err := http.Post(px+"/search?q=1", "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if got := up.n.Load(); got != 4 {
		t.Fatalf("upstream ran %d times, want 4 (keyless and passed routes are not guarded)", got)
	}

	// With RequireKey, a keyless write is refused.
	px = newProxy(t, newStore(t, nil), newServer(t, &up).URL, func(o *idemproxy.Options) { o.RequireKey = true })
	if resp, _ := post(t, px, "", "acme", `{}`); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("keyless write with RequireKey: %d, want 400", resp.StatusCode)
	}
}

func TestProxy_ServeHTTP_UpstreamDown(t *testing.T) {
	// A port nothing listens on: the request is never sent.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	store := newStore(t, nil)
	px := newProxy(t, store, "http://"+addr, nil)
	resp, body := post(t, px, "k1", "acme", `{}`)
	if resp.StatusCode != http.StatusBadGateway || resp.Header.Get(idemproxy.HeaderOutcome) != idemproxy.OutcomeNotSent ||
		!strings.Contains(body, idemproxy.ProblemUpstreamUnreachable) {
		t.Fatalf("upstream down: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	// The claim was released: once the upstream is up, the retry runs.
	var up refunds
	srv := &http.Server{Handler: &up}
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("port %s taken again meanwhile: %v", addr, err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	if resp, _ := post(t, px, "k1", "acme", `{}`); resp.StatusCode != http.StatusCreated || up.n.Load() != 1 {
		t.Fatalf("retry after the upstream came up: %d, %d runs", resp.StatusCode, up.n.Load())
	}
}

// dropper reads a request, acts (counts), and drops the connection without
// answering, the first time; later it answers 201.
type dropper struct{ n atomic.Int64 }

func (d *dropper) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.ReadAll(r.Body)
	if d.n.Add(1) == 1 {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	}
	w.WriteHeader(http.StatusCreated)
}

func TestProxy_ServeHTTP_DroppedHeld(t *testing.T) {
	var up dropper
	px := newProxy(t, newStore(t, nil), newServer(t, &up).URL, nil)
	resp, body := post(t, px, "k1", "acme", `{}`)
	if resp.StatusCode != http.StatusBadGateway || resp.Header.Get(idemproxy.HeaderOutcome) != idemproxy.OutcomeUnknown ||
		!strings.Contains(body, idemproxy.ProblemUpstreamOutcomeUnknown) {
		t.Fatalf("dropped: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	// Without a resolver URL, the claim is held: never run again.
	for range 3 {
		resp, body := post(t, px, "k1", "acme", `{}`)
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, idemhttp.ProblemOutcomeUnknown) {
			t.Fatalf("retry of a held claim: %d %s, want 503 outcome-unknown", resp.StatusCode, body)
		}
	}
	if got := up.n.Load(); got != 1 {
		t.Fatalf("upstream ran %d times, want 1", got)
	}
}

func TestProxy_ServeHTTP_Timeout(t *testing.T) {
	release := make(chan struct{})
	var runs atomic.Int64
	up := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release) })
	px := newProxy(t, newStore(t, nil), up.URL, func(o *idemproxy.Options) { o.Timeout = 100 * time.Millisecond })
	resp, body := post(t, px, "k1", "acme", `{}`)
	if resp.StatusCode != http.StatusGatewayTimeout || resp.Header.Get(idemproxy.HeaderOutcome) != idemproxy.OutcomeUnknown {
		t.Fatalf("timeout: %d %s, want 504 outcome unknown", resp.StatusCode, body)
	}
	if resp, _ := post(t, px, "k1", "acme", `{}`); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("retry after a timeout: %d, want 503", resp.StatusCode)
	}
	if runs.Load() != 1 {
		t.Fatalf("upstream ran %d times, want 1", runs.Load())
	}
}

func TestProxy_ServeHTTP_LargeResponse(t *testing.T) {
	var runs atomic.Int64
	big := strings.Repeat("x", 3000)
	up := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, big)
	}))
	px := newProxy(t, newStore(t, nil), up.URL, func(o *idemproxy.Options) { o.MaxResponseBytes = 1000 })
	resp, body := post(t, px, "k1", "acme", `{}`)
	if resp.StatusCode != http.StatusCreated || body != big {
		t.Fatalf("first call: %d, %d bytes; want 201 and all %d", resp.StatusCode, len(body), len(big))
	}
	resp, body = post(t, px, "k1", "acme", `{}`)
	if resp.StatusCode != http.StatusCreated || !strings.Contains(body, idemhttp.ProblemResponseNotKept) {
		t.Fatalf("repeat: %d %s, want 201 response-not-kept", resp.StatusCode, body)
	}
	if runs.Load() != 1 {
		t.Fatalf("upstream ran %d times, want 1", runs.Load())
	}
}

func TestProxy_ServeHTTP_EventStream(t *testing.T) {
	up := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 3 {
			_, _ = io.WriteString(w, "data: "+string(rune('a'+i))+"\n\n")
			http.NewResponseController(w).Flush()
		}
	}))
	px := newProxy(t, newStore(t, nil), up.URL, nil)
	_, first := post(t, px, "k1", "acme", `{}`)
	again, second := post(t, px, "k1", "acme", `{}`)
	if first != "data: a\n\ndata: b\n\ndata: c\n\n" || second != first || again.Header.Get(idemhttp.HeaderReplayed) != "true" {
		t.Fatalf("event stream: %q then %q", first, second)
	}
}

func TestHTTPResolver_Resolve_Committed(t *testing.T) {
	var asked []idemproxy.ResolveRequest
	resolver := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var q idemproxy.ResolveRequest
		if err := json.NewDecoder(r.Body).Decode(&q); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		asked = append(asked, q)
		_ = json.NewEncoder(w).Encode(idemproxy.ResolveAnswer{Verdict: "committed", Status: 201,
			Headers: map[string][]string{"content-type": {"application/json"}}, Body: `{"refund":1}`})
	}))
	var up dropper
	store := newStore(t, &idemproxy.HTTPResolver{URL: resolver.URL})
	px := newProxy(t, store, newServer(t, &up).URL, nil)
	if resp, _ := post(t, px, "k1", "acme", `{}`); resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("dropped: %d, want 502", resp.StatusCode)
	}
	resp, body := post(t, px, "k1", "acme", `{}`)
	if resp.StatusCode != http.StatusCreated || body != `{"refund":1}` || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("after the resolver said committed: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	if len(asked) != 1 || asked[0].Scope != "acme" || asked[0].Key != "k1" || asked[0].Holder == "" ||
		!strings.HasPrefix(asked[0].Fingerprint, "idemfp") || asked[0].ClaimedAt.IsZero() {
		t.Fatalf("resolver asked %+v", asked)
	}
	if up.n.Load() != 1 {
		t.Fatalf("upstream ran %d times, want 1", up.n.Load())
	}
}

func TestHTTPResolver_Resolve_NotCommitted(t *testing.T) {
	resolver := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"verdict":"not_committed"}`)
	}))
	var up dropper
	px := newProxy(t, newStore(t, &idemproxy.HTTPResolver{URL: resolver.URL}), newServer(t, &up).URL, nil)
	post(t, px, "k1", "acme", `{}`)
	if resp, _ := post(t, px, "k1", "acme", `{}`); resp.StatusCode != http.StatusCreated || up.n.Load() != 2 {
		t.Fatalf("after not_committed: %d, %d runs; want 201 and a second run", resp.StatusCode, up.n.Load())
	}
}

func TestParseAnswer_Malformed(t *testing.T) {
	for _, raw := range []string{`{`, `{"verdict":"yes"}`, `{"verdict":"committed","status":42}`,
		`{"verdict":"committed","status":200,"body":"a","body_base64":"YQ=="}`} {
		if _, err := idemproxy.ParseAnswer([]byte(raw)); err == nil {
			t.Errorf("ParseAnswer(%s) = nil error", raw)
		}
	}
	res, err := idemproxy.ParseAnswer([]byte(`{"verdict":"committed","status":200,"body_base64":"AAE="}`))
	if err != nil || res.Verdict != idem.VerdictCommitted || string(res.Result.Body) != "\x00\x01" {
		t.Fatalf("base64 body: %+v %v", res, err)
	}
}

func TestHTTPResolver_Resolve_Failing(t *testing.T) {
	resolver := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "down", http.StatusInternalServerError)
	}))
	r := &idemproxy.HTTPResolver{URL: resolver.URL}
	if _, err := r.Resolve(context.Background(), &idem.Record{Scope: "s", Key: "k"}); err == nil {
		t.Fatal("a 500 from the resolver is not an error")
	}
}

func TestParseScope(t *testing.T) {
	for _, bad := range []string{"", "header:", "tenant", "fixed:"} {
		if _, err := idemproxy.ParseScope(bad); !errors.Is(err, idemproxy.ErrInvalidOptions) && err == nil {
			t.Errorf("ParseScope(%q) accepted", bad)
		}
	}
	f, err := idemproxy.ParseScope("fixed:refunds")
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := f(&http.Request{}); s != "refunds" {
		t.Fatalf("fixed scope %q", s)
	}
}

func TestNew_Invalid(t *testing.T) {
	if _, err := idemproxy.New(nil, &idemproxy.Options{}); !errors.Is(err, idemproxy.ErrInvalidOptions) {
		t.Fatalf("no upstream: %v", err)
	}
}
