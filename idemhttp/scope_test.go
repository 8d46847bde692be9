package idemhttp_test

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
)

func TestMiddleware_ScopeRequired(t *testing.T) {
	store := newStore(t, nil)
	for name, opts := range map[string]*idemhttp.Options{"nil options": nil, "no Scope": {Wait: 1}} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				msg, _ := recover().(string)
				if !strings.Contains(msg, "Options.Scope") || !strings.Contains(msg, "SharedScope") ||
					!strings.Contains(msg, "PrincipalScope") {
					t.Fatalf("panic %q does not say how to choose a scope", msg)
				}
			}()
			idemhttp.Middleware(store, opts)
		})
	}
}

// authenticate is a server's authentication layer as PrincipalScope
// expects it: it verifies the bearer token (here, a table of tokens) and
// puts the subject it names in the context. Two tokens name one subject:
// a token refreshed between retries.
func authenticate(next http.Handler) http.Handler {
	tokens := map[string]string{"tok-a1": "tenant-a", "tok-a2": "tenant-a", "tok-b": "tenant-b", "tok-odd": "bad\nscope"}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if sub, ok := tokens[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]; ok {
			r = r.WithContext(idemhttp.WithPrincipal(r.Context(), sub))
		}
		next.ServeHTTP(w, r)
	})
}

// TestPrincipalScope checks the safe default for several callers: a key
// and body that tenant A used, sent by tenant B, runs for B (B never gets
// A's response, nor a 422 that tells it the key exists), and A's retry
// after a token refresh replays A's response.
func TestPrincipalScope(t *testing.T) {
	store := newStore(t, nil)
	h := &counter{}
	srv := newServer(t, authenticate(idemhttp.Middleware(store, &idemhttp.Options{Scope: idemhttp.PrincipalScope})(h)))
	const body = `{"order":"o-1","amount":"12.50"}`

	a := send(t, "POST", srv.URL+"/refunds", "k", body, "Authorization", "Bearer tok-a1")
	b := send(t, "POST", srv.URL+"/refunds", "k", body, "Authorization", "Bearer tok-b")
	if a.status != http.StatusCreated || b.status != http.StatusCreated || a.body == b.body ||
		b.header.Get(idemhttp.HeaderReplayed) != "" {
		t.Fatalf("tenant b got %d %s (replayed %q) after tenant a's %s", b.status, b.body,
			b.header.Get(idemhttp.HeaderReplayed), a.body)
	}
	if r := send(t, "POST", srv.URL+"/refunds", "k", `{"other":1}`, "Authorization", "Bearer tok-b"); r.status != http.StatusUnprocessableEntity {
		t.Fatalf("tenant b's own mismatch: %d", r.status)
	}
	refreshed := send(t, "POST", srv.URL+"/refunds", "k", body, "Authorization", "Bearer tok-a2")
	if refreshed.body != a.body || refreshed.header.Get(idemhttp.HeaderReplayed) != "true" {
		t.Fatalf("tenant a after a token refresh: %d %s, want the replay of %s", refreshed.status, refreshed.body, a.body)
	}
	if rec := recordGet(t, store, "tenant-a", "k"); rec.Result == nil || string(rec.Result.Body) != a.body {
		t.Fatalf("tenant a's record: %+v", rec)
	}

	r := send(t, "POST", srv.URL+"/refunds", "k", body)
	if p := r.problem(t); r.status != http.StatusUnauthorized || p.Type != idemhttp.ProblemInvalidScope {
		t.Fatalf("no credentials: %d %+v", r.status, p)
	}
	r = send(t, "POST", srv.URL+"/refunds", "k", body, "Authorization", "Bearer tok-odd")
	if p := r.problem(t); r.status != http.StatusBadRequest || p.Type != idemhttp.ProblemInvalidScope ||
		strings.Contains(r.body, "bad") {
		t.Fatalf("a subject that is no valid scope: %d %s", r.status, r.body)
	}
	if h.count() != 2 {
		t.Fatalf("handler ran %d times, want once per tenant", h.count())
	}
}

func TestPrincipalFromContext(t *testing.T) {
	req, _ := http.NewRequest("POST", "http://x/", nil)
	if _, err := idemhttp.PrincipalScope(req); !errors.Is(err, idemhttp.ErrUnauthenticated) {
		t.Fatalf("no principal: %v", err)
	}
	req = req.WithContext(idemhttp.WithPrincipal(req.Context(), ""))
	if _, ok := idemhttp.PrincipalFromContext(req.Context()); ok {
		t.Fatal("an empty subject counts as a principal")
	}
	req = req.WithContext(idemhttp.WithPrincipal(req.Context(), "svc-billing"))
	if s, err := idemhttp.PrincipalScope(req); s != "svc-billing" || err != nil {
		t.Fatalf("%q %v", s, err)
	}
}

// TestMiddleware_ErrorTextsStayOnTheServer checks that the text of a
// Scope error, which may carry credentials, reaches OnError (the server's
// logger) and not the client, unless OnError redacts it into the detail.
func TestMiddleware_ErrorTextsStayOnTheServer(t *testing.T) {
	const secret = "password=hunter2"
	scope := func(r *http.Request) (string, error) {
		switch r.Header.Get("X-Case") {
		case "unauthenticated":
			return "", fmt.Errorf("token tok-%s expired: %w", secret, idemhttp.ErrUnauthenticated)
		case "malformed":
			return "tenant\n" + secret, nil
		}
		return "", fmt.Errorf("tenant lookup: dial postgres://app:%s@db: refused", secret)
	}
	for _, redact := range []bool{false, true} {
		t.Run(fmt.Sprintf("redact=%t", redact), func(t *testing.T) {
			store := newStore(t, nil)
			var (
				mu     sync.Mutex // guards logged
				logged []error
			)
			opts := &idemhttp.Options{Scope: scope}
			opts.OnError = func(r *http.Request, err error, p *idemhttp.Problem) {
				mu.Lock()
				logged = append(logged, err)
				mu.Unlock()
				if redact {
					p.Detail = "tenant unknown: " + r.Header.Get("X-Case")
					p.Status, p.Type = 299, "changed" // only Detail is taken
				}
			}
			h := &counter{}
			srv := newServer(t, idemhttp.Middleware(store, opts)(h))
			for _, c := range []struct {
				name   string
				status int
			}{{"unauthenticated", 401}, {"malformed", 400}, {"lookup", 400}} {
				r := send(t, "POST", srv.URL+"/x", "k", `{}`, "X-Case", c.name)
				p := r.problem(t)
				if r.status != c.status || p.Type != idemhttp.ProblemInvalidScope || strings.Contains(r.body, secret) ||
					!strings.Contains(p.Detail, `"k"`) && !redact {
					t.Errorf("%s: %d %s", c.name, r.status, r.body)
				}
				if redact && p.Detail != "tenant unknown: "+c.name {
					t.Errorf("%s: redacted detail not sent: %s", c.name, r.body)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if len(logged) != 3 || !strings.Contains(logged[0].Error(), secret) || !strings.Contains(logged[2].Error(), secret) ||
				!errors.Is(logged[1], idem.ErrInvalidKey) {
				t.Errorf("OnError got %v", logged)
			}
			if h.count() != 0 {
				t.Errorf("handler ran %d times", h.count())
			}
		})
	}
}

// TestMiddleware_UnavailableErrorToOnError checks that a storage error
// behind a 503 reaches OnError and not the client.
func TestMiddleware_UnavailableErrorToOnError(t *testing.T) {
	store := newStore(t, nil)
	var got error
	opts := &idemhttp.Options{Scope: idemhttp.SharedScope,
		OnError: func(_ *http.Request, err error, _ *idemhttp.Problem) { got = err }}
	srv := newServer(t, idemhttp.Middleware(store, opts)(&counter{}))
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	r := send(t, "POST", srv.URL+"/x", "k", `{}`)
	if p := r.problem(t); r.status != http.StatusServiceUnavailable || p.Type != idemhttp.ProblemUnavailable ||
		strings.Contains(r.body, "closed") {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if !errors.Is(got, idem.ErrClosed) {
		t.Fatalf("OnError got %v", got)
	}
}

// TestKeyFromContext checks that the handler gets the key as the store
// holds it, unquoted, whichever form the client sent.
func TestKeyFromContext(t *testing.T) {
	store := newStore(t, nil)
	var (
		mu   sync.Mutex // guards seen
		seen []string
	)
	srv := newServer(t, idemhttp.Middleware(store, shared())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, ok := idemhttp.KeyFromContext(r.Context())
		mu.Lock()
		seen = append(seen, fmt.Sprintf("%s %t raw=%s", key, ok, r.Header.Get(idemhttp.HeaderKey)))
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	})))
	send(t, "POST", srv.URL+"/x", `"q-1"`, `{}`)
	send(t, "POST", srv.URL+"/x", `"q\"2"`, `{}`)
	send(t, "POST", srv.URL+"/x", `q-3`, `{}`)
	if r := send(t, "POST", srv.URL+"/x", `q-1`, `{}`); r.header.Get(idemhttp.HeaderReplayed) != "true" {
		t.Fatalf("bare q-1 after quoted q-1: %d, not a replay", r.status)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{`q-1 true raw="q-1"`, `q"2 true raw="q\"2"`, `q-3 true raw=q-3`}
	if strings.Join(seen, "\n") != strings.Join(want, "\n") {
		t.Fatalf("handler saw\n%s\nwant\n%s", strings.Join(seen, "\n"), strings.Join(want, "\n"))
	}
	recordGet(t, store, "", `q"2`)
	if _, ok := idemhttp.KeyFromContext(t.Context()); ok {
		t.Fatal("a key outside a handler")
	}
}
