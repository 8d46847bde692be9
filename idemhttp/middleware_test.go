package idemhttp_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/badgerstore"
	"github.com/idemkit/idem/idemhttp"
)

func TestMiddleware_FirstRequestRuns(t *testing.T) {
	store := newStore(t, nil)
	h := &counter{}
	srv := newServer(t, idemhttp.Middleware(store, shared())(h))

	r := send(t, "POST", srv.URL+"/refunds", "k1", `{"order":"o-1","amount":"12.50"}`)
	if r.status != http.StatusCreated || r.body != `{"refund":"r1"}` {
		t.Fatalf("got %d %s", r.status, r.body)
	}
	if r.header.Get(idemhttp.HeaderReplayed) != "" {
		t.Fatalf("first response marked replayed")
	}
	if r.header.Get("Set-Cookie") == "" || r.header.Get("X-Not-Saved") == "" {
		t.Fatalf("the first response must carry every header the handler set: %v", r.header)
	}
	if b := h.bodies(); len(b) != 1 || b[0] != `{"order":"o-1","amount":"12.50"}` {
		t.Fatalf("handler saw bodies %q", b)
	}
	rec := recordGet(t, store, "", "k1")
	if rec.State != idem.StateDone || rec.Result.Status != http.StatusCreated {
		t.Fatalf("record %+v", rec)
	}
}

func TestMiddleware_Replay(t *testing.T) {
	store := newStore(t, nil)
	h := &counter{}
	srv := newServer(t, idemhttp.Middleware(store, shared())(h))

	first := send(t, "POST", srv.URL+"/refunds", "k1", `{"amount":1}`)
	for range 3 {
		r := send(t, "POST", srv.URL+"/refunds", "k1", `{"amount":1}`)
		if r.status != first.status || r.body != first.body {
			t.Fatalf("replay %d %s, first %d %s", r.status, r.body, first.status, first.body)
		}
		if r.header.Get(idemhttp.HeaderReplayed) != "true" {
			t.Fatalf("replay not marked: %v", r.header)
		}
		if r.header.Get("Location") != "/refunds/r1" || r.header.Get("Content-Type") != "application/json" {
			t.Fatalf("saved headers not replayed: %v", r.header)
		}
		if r.header.Get("Set-Cookie") != "" || r.header.Get("X-Not-Saved") != "" {
			t.Fatalf("headers outside the allow-list replayed: %v", r.header)
		}
	}
	if h.count() != 1 {
		t.Fatalf("handler ran %d times", h.count())
	}
}

func TestMiddleware_QuotedKeyIsTheSameKey(t *testing.T) {
	store := newStore(t, nil)
	h := &counter{}
	srv := newServer(t, idemhttp.Middleware(store, shared())(h))

	send(t, "POST", srv.URL+"/x", `"abc"`, `{}`)
	r := send(t, "POST", srv.URL+"/x", `abc`, `{}`)
	if r.header.Get(idemhttp.HeaderReplayed) != "true" || h.count() != 1 {
		t.Fatalf("bare and quoted key differ: %d runs, %v", h.count(), r.header)
	}
}

func TestMiddleware_InProgress(t *testing.T) {
	store := newStore(t, nil)
	started, release := make(chan struct{}), make(chan struct{})
	var runs atomic.Int32
	srv := newServer(t, idemhttp.Middleware(store, shared())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		close(started)
		<-release
		w.WriteHeader(http.StatusCreated)
	})))

	first := make(chan reply, 1)
	go func() { first <- send(t, "POST", srv.URL+"/x", "k", `{}`) }()
	<-started
	r := send(t, "POST", srv.URL+"/x", "k", `{}`)
	p := r.problem(t)
	if r.status != http.StatusConflict || p.Type != idemhttp.ProblemInProgress || p.Key != "k" {
		t.Fatalf("got %d %+v", r.status, p)
	}
	if r.header.Get("Retry-After") != "1" {
		t.Fatalf("Retry-After %q, want 1", r.header.Get("Retry-After"))
	}
	if !strings.Contains(p.Detail, `"k"`) {
		t.Fatalf("detail does not name the key: %q", p.Detail)
	}
	close(release)
	if f := <-first; f.status != http.StatusCreated {
		t.Fatalf("first got %d", f.status)
	}
	r = send(t, "POST", srv.URL+"/x", "k", `{}`)
	if r.status != http.StatusCreated || r.header.Get(idemhttp.HeaderReplayed) != "true" || runs.Load() != 1 {
		t.Fatalf("after the first finished: %d %v, %d runs", r.status, r.header, runs.Load())
	}
}

func TestMiddleware_Wait_ReplaysFirstAttempt(t *testing.T) {
	waiting := make(chan struct{}, 64)
	store := newStore(t, &idem.Options{Observer: idem.ObserverFunc(func(e idem.Event) {
		if e.Kind == idem.EventInProgress {
			waiting <- struct{}{}
		}
	})})
	started, release := make(chan struct{}), make(chan struct{})
	var runs atomic.Int32
	srv := newServer(t, idemhttp.Middleware(store, &idemhttp.Options{Scope: idemhttp.SharedScope, Wait: time.Minute})(http.HandlerFunc(
		func(w http.ResponseWriter, r *http.Request) {
			n := runs.Add(1)
			close(started)
			<-release
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, "run %d", n)
		})))

	first := make(chan reply, 1)
	go func() { first <- send(t, "POST", srv.URL+"/x", "k", `{}`) }()
	<-started
	second := make(chan reply, 1)
	go func() { second <- send(t, "POST", srv.URL+"/x", "k", `{}`) }()
	<-waiting // the second request met the running first one
	close(release)
	f, s := <-first, <-second
	if f.status != http.StatusCreated || s.status != http.StatusCreated || s.body != "run 1" || f.body != "run 1" {
		t.Fatalf("first %d %q, second %d %q", f.status, f.body, s.status, s.body)
	}
	if s.header.Get(idemhttp.HeaderReplayed) != "true" || runs.Load() != 1 {
		t.Fatalf("second not a replay: %v, %d runs", s.header, runs.Load())
	}
}

func TestMiddleware_Wait_GivesUpWith409(t *testing.T) {
	clock := newClock()
	store := newStore(t, &idem.Options{Clock: clock})
	started, release := make(chan struct{}), make(chan struct{})
	srv := newServer(t, idemhttp.Middleware(store, &idemhttp.Options{Scope: idemhttp.SharedScope, Wait: 5 * time.Second})(http.HandlerFunc(
		func(w http.ResponseWriter, r *http.Request) {
			close(started)
			<-release
		})))
	defer close(release)

	go send(t, "POST", srv.URL+"/x", "k", `{}`)
	<-started
	second := make(chan reply, 1)
	go func() { second <- send(t, "POST", srv.URL+"/x", "k", `{}`) }()
	// The clock moves on a second whenever the second request is waiting
	// on it: two waits pending, its poll and the first request's lease
	// heartbeat (a third of the 30s default lease, so it never fires here).
	done := make(chan struct{})
	advanced := make(chan struct{})
	go func() {
		defer close(advanced)
		for {
			clock.BlockUntil(2)
			select {
			case <-done:
				return
			default:
			}
			clock.Advance(time.Second)
		}
	}()
	r := <-second
	close(done)
	clock.After(time.Hour) // a second pending wait, so that the advancer sees done
	<-advanced
	if r.status != http.StatusConflict || r.problem(t).Type != idemhttp.ProblemInProgress {
		t.Fatalf("got %d %s", r.status, r.body)
	}
}

func TestMiddleware_Mismatch(t *testing.T) {
	store := newStore(t, nil)
	h := &counter{}
	srv := newServer(t, idemhttp.Middleware(store, shared())(h))

	send(t, "POST", srv.URL+"/refunds?order=1&x=2", "k", `{"amount":"10.00"}`)
	for _, tc := range []struct{ name, method, path, body string }{
		{"body", "POST", "/refunds?order=1&x=2", `{"amount":"99.00"}`},
		{"route", "POST", "/payouts?order=1&x=2", `{"amount":"10.00"}`},
		{"query", "POST", "/refunds?order=2&x=2", `{"amount":"10.00"}`},
		{"method", "PATCH", "/refunds?order=1&x=2", `{"amount":"10.00"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := send(t, tc.method, srv.URL+tc.path, "k", tc.body)
			p := r.problem(t)
			if r.status != http.StatusUnprocessableEntity || p.Type != idemhttp.ProblemMismatch || p.Key != "k" {
				t.Fatalf("got %d %+v", r.status, p)
			}
			if strings.Contains(r.body, "99.00") {
				t.Fatalf("problem leaks the body: %s", r.body)
			}
		})
	}
	// The query in another order is the same route.
	r := send(t, "POST", srv.URL+"/refunds?x=2&order=1", "k", `{"amount":"10.00"}`)
	if r.status != http.StatusCreated || r.header.Get(idemhttp.HeaderReplayed) != "true" {
		t.Fatalf("reordered query: %d %s", r.status, r.body)
	}
	if h.count() != 1 {
		t.Fatalf("handler ran %d times", h.count())
	}
}

func TestMiddleware_MissingOrInvalidKey(t *testing.T) {
	store := newStore(t, nil)
	h := &counter{}
	srv := newServer(t, idemhttp.Middleware(store, shared())(h))

	r := send(t, "POST", srv.URL+"/x", "", `{}`)
	if p := r.problem(t); r.status != http.StatusBadRequest || p.Type != idemhttp.ProblemMissingKey {
		t.Fatalf("missing key: %d %+v", r.status, p)
	}
	for name, extra := range map[string][]string{
		"empty":         {idemhttp.HeaderKey, ""},
		"empty quoted":  {idemhttp.HeaderKey, `""`},
		"too long":      {idemhttp.HeaderKey, strings.Repeat("k", backend.MaxKeyLen+1)},
		"not ascii":     {idemhttp.HeaderKey, "schlüssel"},
		"bad quoting":   {idemhttp.HeaderKey, `"a"b"`},
		"bad escape":    {idemhttp.HeaderKey, `"a\b"`},
		"sent twice":    {idemhttp.HeaderKey, "a", idemhttp.HeaderKey, "b"},
		"twice, equal":  {idemhttp.HeaderKey, "a", idemhttp.HeaderKey, "a"},
		"quoted, space": {idemhttp.HeaderKey, `" "`},
	} {
		t.Run(name, func(t *testing.T) {
			r := send(t, "POST", srv.URL+"/x", "", `{}`, extra...)
			if name == "quoted, space" {
				// A single space is a valid key.
				if r.status != http.StatusCreated {
					t.Fatalf("got %d %s", r.status, r.body)
				}
				return
			}
			p := r.problem(t)
			if r.status != http.StatusBadRequest || p.Type != idemhttp.ProblemInvalidKey {
				t.Fatalf("got %d %+v", r.status, p)
			}
		})
	}
	if h.count() != 1 {
		t.Fatalf("handler ran %d times, want only for the valid key", h.count())
	}
}

func TestMiddleware_PassThrough(t *testing.T) {
	store := newStore(t, nil)
	h := &counter{}
	mw := idemhttp.Middleware(store, &idemhttp.Options{Scope: idemhttp.SharedScope,
		Skip: func(r *http.Request) bool { return r.URL.Path == "/search" },
	})
	srv := newServer(t, mw(h))

	for _, tc := range []struct{ method, path string }{
		{"GET", "/refunds"}, {"HEAD", "/refunds"}, {"DELETE", "/refunds/1"}, {"PUT", "/refunds/1"}, {"POST", "/search"},
	} {
		r := send(t, tc.method, srv.URL+tc.path, "", `{}`)
		if r.status != http.StatusCreated {
			t.Fatalf("%s %s without a key: %d %s", tc.method, tc.path, r.status, r.body)
		}
	}
	// A key on a method that passes through is ignored: it runs every time.
	send(t, "GET", srv.URL+"/refunds", "k", "")
	send(t, "GET", srv.URL+"/refunds", "k", "")
	if h.count() != 7 {
		t.Fatalf("handler ran %d times, want 7", h.count())
	}
}

func TestMiddleware_Methods(t *testing.T) {
	store := newStore(t, nil)
	h := &counter{}
	srv := newServer(t, idemhttp.Middleware(store, &idemhttp.Options{Scope: idemhttp.SharedScope, Methods: []string{"put", "DELETE"}})(h))

	if r := send(t, "PUT", srv.URL+"/x", "", `{}`); r.status != http.StatusBadRequest {
		t.Fatalf("PUT without key: %d", r.status)
	}
	if r := send(t, "POST", srv.URL+"/x", "", `{}`); r.status != http.StatusCreated {
		t.Fatalf("POST passes through: %d", r.status)
	}
	send(t, "DELETE", srv.URL+"/x", "d", ``)
	if r := send(t, "DELETE", srv.URL+"/x", "d", ``); r.header.Get(idemhttp.HeaderReplayed) != "true" {
		t.Fatalf("DELETE not replayed")
	}
}

// failingBackend fails every claim, as a backend whose disk went away.
type failingBackend struct{ backend.Backend }

func (failingBackend) Claim(context.Context, string, string, backend.ClaimArgs) (*idem.Record, bool, error) {
	return nil, false, fmt.Errorf("%w: disk went away", idem.ErrUnavailable)
}

func TestMiddleware_Unavailable(t *testing.T) {
	b, err := badgerstore.Open("", badgerstore.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	failing := idem.New(failingBackend{b}, &idem.Options{SweepInterval: -1})
	t.Cleanup(func() { _ = failing.Close() })
	closed := newStore(t, nil)
	if err := closed.Close(); err != nil {
		t.Fatal(err)
	}

	for name, store := range map[string]*idem.Store{"failing backend": failing, "closed store": closed} {
		t.Run(name, func(t *testing.T) {
			h := &counter{}
			srv := newServer(t, idemhttp.Middleware(store, shared())(h))
			r := send(t, "POST", srv.URL+"/x", "k", `{}`)
			p := r.problem(t)
			if r.status != http.StatusServiceUnavailable || p.Type != idemhttp.ProblemUnavailable || p.Key != "k" {
				t.Fatalf("got %d %+v", r.status, p)
			}
			if r.header.Get("Retry-After") == "" {
				t.Fatalf("no Retry-After")
			}
			if h.count() != 0 {
				t.Fatalf("the handler ran on an unavailable store")
			}
		})
	}
}

// holdOn504 holds the claim for recovery when the handler answers 504: the
// downstream timed out and the effect may or may not have happened.
func holdOn504(res idem.Result, err error) idem.Decision {
	if res.Status == http.StatusGatewayTimeout {
		return idem.DecisionHold
	}
	return idem.DefaultPolicy(res, err)
}

func TestMiddleware_OutcomeUnknown(t *testing.T) {
	saved := idem.Result{Status: http.StatusCreated, Header: map[string][]string{"content-type": {"application/json"}},
		Body: []byte(`{"refund":"from-ledger"}`)}
	for _, tc := range []struct {
		name       string
		resolver   idem.Resolver
		status     int
		retryAfter string
		body       string
		runs       int32
	}{
		{name: "no resolver", status: http.StatusServiceUnavailable, runs: 1},
		{name: "resolver unknown", resolver: idem.ResolverFunc(func(context.Context, *idem.Record) (idem.Resolution, error) {
			return idem.Resolution{Verdict: idem.VerdictUnknown}, nil
		}), status: http.StatusServiceUnavailable, retryAfter: "2", runs: 1},
		{name: "resolver committed", resolver: idem.ResolverFunc(func(context.Context, *idem.Record) (idem.Resolution, error) {
			return idem.Resolution{Verdict: idem.VerdictCommitted, Result: saved}, nil
		}), status: http.StatusCreated, body: `{"refund":"from-ledger"}`, runs: 1},
		{name: "resolver not committed", resolver: idem.ResolverFunc(func(context.Context, *idem.Record) (idem.Resolution, error) {
			return idem.Resolution{Verdict: idem.VerdictNotCommitted}, nil
		}), status: http.StatusOK, body: "ran 2", runs: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newClock()
			store := newStore(t, &idem.Options{Clock: clock, Policy: holdOn504, Resolver: tc.resolver,
				RecheckBackoff: 2 * time.Second, RecoveryGrace: 10 * time.Second})
			var runs atomic.Int32
			srv := newServer(t, idemhttp.Middleware(store, shared())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if n := runs.Add(1); n == 1 {
					w.WriteHeader(http.StatusGatewayTimeout)
				} else {
					fmt.Fprintf(w, "ran %d", n)
				}
			})))
			if r := send(t, "POST", srv.URL+"/x", "k", `{}`); r.status != http.StatusGatewayTimeout {
				t.Fatalf("first: %d", r.status)
			}
			// Within the grace the timed-out write may still land
			// downstream: the Resolver is not asked yet.
			r := send(t, "POST", srv.URL+"/x", "k", `{}`)
			if p := r.problem(t); r.status != http.StatusServiceUnavailable || p.Type != idemhttp.ProblemOutcomeUnknown ||
				r.header.Get("Retry-After") != "10" || runs.Load() != 1 {
				t.Fatalf("within the grace: %d, Retry-After %q, %d runs: %s", r.status, r.header.Get("Retry-After"), runs.Load(), r.body)
			}
			clock.Advance(10 * time.Second)
			r = send(t, "POST", srv.URL+"/x", "k", `{}`)
			if r.status != tc.status || r.header.Get("Retry-After") != tc.retryAfter || runs.Load() != tc.runs {
				t.Fatalf("got %d, Retry-After %q, %d runs: %s", r.status, r.header.Get("Retry-After"), runs.Load(), r.body)
			}
			if tc.body != "" {
				if r.body != tc.body {
					t.Fatalf("body %q, want %q", r.body, tc.body)
				}
				return
			}
			if p := r.problem(t); p.Type != idemhttp.ProblemOutcomeUnknown || p.Key != "k" {
				t.Fatalf("problem %+v", p)
			}
		})
	}
}

func TestMiddleware_UnknownStatus(t *testing.T) {
	store := newStore(t, &idem.Options{Policy: holdOn504})
	srv := newServer(t, idemhttp.Middleware(store, &idemhttp.Options{Scope: idemhttp.SharedScope, UnknownStatus: http.StatusConflict})(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusGatewayTimeout) })))
	send(t, "POST", srv.URL+"/x", "k", `{}`)
	r := send(t, "POST", srv.URL+"/x", "k", `{}`)
	if p := r.problem(t); r.status != http.StatusConflict || p.Type != idemhttp.ProblemOutcomeUnknown {
		t.Fatalf("got %d %+v", r.status, p)
	}
}

// TestMiddleware_CrashRecovery closes the store under a running handler,
// as a crash leaves it, reopens the directory, and checks that recovery
// asks the ledger and replays its answer instead of running again.
func TestMiddleware_CrashRecovery(t *testing.T) {
	dir := t.TempDir()
	var ledger sync.Map // key -> refund id
	resolver := idem.ResolverFunc(func(_ context.Context, rec *idem.Record) (idem.Resolution, error) {
		id, ok := ledger.Load(rec.Key)
		if !ok {
			return idem.Resolution{Verdict: idem.VerdictNotCommitted}, nil
		}
		return idem.Resolution{Verdict: idem.VerdictCommitted, Result: idem.Result{Status: http.StatusCreated,
			Body: []byte(id.(string))}}, nil
	})
	var runs atomic.Int32
	effected, finish := make(chan struct{}), make(chan struct{})
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		ledger.Store(r.Header.Get(idemhttp.HeaderKey), fmt.Sprintf("refund-%d", n))
		if n == 1 {
			close(effected)
			<-finish
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "refund-%d", n)
	})

	s1, err := idem.Open(dir, &idem.Options{SweepInterval: -1, CloseTimeout: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv1 := newServer(t, idemhttp.Middleware(s1, shared())(handler))
	go func() {
		// The response may or may not reach the client; the crash is what counts.
		req, _ := http.NewRequest("POST", srv1.URL+"/refunds", strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(idemhttp.HeaderKey, "k")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	<-effected
	if err := s1.Close(); err != nil { // the claim is still open: it is left behind
		t.Fatal(err)
	}
	close(finish)
	srv1.Close()

	s2, err := idem.Open(dir, &idem.Options{SweepInterval: -1, Resolver: resolver})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s2.Close() })
	srv2 := newServer(t, idemhttp.Middleware(s2, shared())(handler))
	r := send(t, "POST", srv2.URL+"/refunds", "k", `{}`)
	if r.status != http.StatusCreated || r.body != "refund-1" || r.header.Get(idemhttp.HeaderReplayed) != "true" {
		t.Fatalf("after restart: %d %q %v", r.status, r.body, r.header)
	}
	if runs.Load() != 1 {
		t.Fatalf("handler ran %d times", runs.Load())
	}
	if rec := recordGet(t, s2, "", "k"); rec.Recovered != "committed" {
		t.Fatalf("record %+v", rec)
	}
}

func TestMiddleware_ScopeIsolation(t *testing.T) {
	store := newStore(t, nil)
	h := &counter{}
	srv := newServer(t, idemhttp.Middleware(store, &idemhttp.Options{
		Scope: func(r *http.Request) (string, error) {
			switch tenant := r.Header.Get("X-Tenant"); tenant {
			case "":
				return "", fmt.Errorf("no tenant: %w", idemhttp.ErrUnauthenticated)
			case "bad":
				return "", errors.New("tenant header malformed")
			case "journal":
				return idem.JournalScope, nil // a tenant id that is idem's own scope
			default:
				return "tenant:" + tenant, nil
			}
		},
	})(h))

	a := send(t, "POST", srv.URL+"/x", "k", `{}`, "X-Tenant", "a")
	b := send(t, "POST", srv.URL+"/x", "k", `{}`, "X-Tenant", "b")
	if a.body == b.body || h.count() != 2 {
		t.Fatalf("one key in two scopes ran %d times: %s, %s", h.count(), a.body, b.body)
	}
	if r := send(t, "POST", srv.URL+"/x", "k", `{}`, "X-Tenant", "a"); r.body != a.body {
		t.Fatalf("tenant a replayed %s, want %s", r.body, a.body)
	}
	if r := send(t, "POST", srv.URL+"/x", "k", `{}`, "X-Tenant", "b"); r.body != b.body {
		t.Fatalf("tenant b replayed %s, want %s", r.body, b.body)
	}
	r := send(t, "POST", srv.URL+"/x", "k", `{}`)
	if p := r.problem(t); r.status != http.StatusUnauthorized || p.Type != idemhttp.ProblemInvalidScope {
		t.Fatalf("no tenant: %d %+v", r.status, p)
	}
	r = send(t, "POST", srv.URL+"/x", "k", `{}`, "X-Tenant", "bad")
	if p := r.problem(t); r.status != http.StatusBadRequest || p.Type != idemhttp.ProblemInvalidScope {
		t.Fatalf("bad tenant: %d %+v", r.status, p)
	}
	r = send(t, "POST", srv.URL+"/x", "k", `{}`, "X-Tenant", "journal")
	if p := r.problem(t); r.status != http.StatusBadRequest || p.Type != idemhttp.ProblemInvalidScope {
		t.Fatalf("reserved scope: %d %+v", r.status, p)
	}
	if h.count() != 2 {
		t.Fatalf("handler ran %d times", h.count())
	}
}

func TestMiddleware_BodyLimit(t *testing.T) {
	store := newStore(t, nil)
	h := &counter{}
	srv := newServer(t, idemhttp.Middleware(store, &idemhttp.Options{Scope: idemhttp.SharedScope, MaxBodyBytes: 16})(h))

	r := send(t, "POST", srv.URL+"/x", "k", strings.Repeat("x", 17))
	if p := r.problem(t); r.status != http.StatusRequestEntityTooLarge || p.Type != idemhttp.ProblemBodyTooLarge {
		t.Fatalf("got %d %+v", r.status, p)
	}
	// Without a Content-Length the limit holds while reading.
	req, _ := http.NewRequest("POST", srv.URL+"/x", io.MultiReader(strings.NewReader(strings.Repeat("y", 40))))
	req.Header.Set(idemhttp.HeaderKey, "k2")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked: %d", resp.StatusCode)
	}
	if h.count() != 0 {
		t.Fatalf("handler ran %d times", h.count())
	}
	// At the limit the body reaches the handler intact.
	r = send(t, "POST", srv.URL+"/x", "k3", strings.Repeat("z", 16), "Content-Type", "text/plain")
	if b := h.bodies(); r.status != http.StatusCreated || len(b) != 1 || b[0] != strings.Repeat("z", 16) {
		t.Fatalf("at the limit: %d, handler saw %q", r.status, b)
	}
}

func TestMiddleware_SavedHeaders(t *testing.T) {
	store := newStore(t, nil)
	srv := newServer(t, idemhttp.Middleware(store, &idemhttp.Options{Scope: idemhttp.SharedScope,
		SavedHeaders: []string{"x-custom", "Set-Cookie", "content-length"},
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Custom", "kept")
		w.Header().Set("Location", "/not/listed")
		http.SetCookie(w, &http.Cookie{Name: "session", Value: "secret"})
		_, _ = io.WriteString(w, "ok")
	})))

	first := send(t, "POST", srv.URL+"/x", "k", `{}`)
	if first.header.Get("Set-Cookie") == "" {
		t.Fatalf("the first response lost its cookie")
	}
	r := send(t, "POST", srv.URL+"/x", "k", `{}`)
	if r.header.Get("X-Custom") != "kept" || r.header.Get("Location") != "" || r.header.Get("Set-Cookie") != "" {
		t.Fatalf("replayed headers: %v", r.header)
	}
	rec := recordGet(t, store, "", "k")
	for h := range rec.Result.Header {
		if h != "X-Custom" {
			t.Fatalf("saved header %q", h)
		}
	}
}

func TestMiddleware_Flusher(t *testing.T) {
	for _, name := range []string{"Flusher", "ResponseController"} {
		t.Run(name, func(t *testing.T) {
			store := newStore(t, nil)
			proceed := make(chan struct{})
			srv := newServer(t, idemhttp.Middleware(store, shared())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/plain")
				_, _ = io.WriteString(w, "first\n")
				if name == "Flusher" {
					w.(http.Flusher).Flush()
				} else if err := http.NewResponseController(w).Flush(); err != nil {
					t.Errorf("flush: %v", err)
				}
				<-proceed
				_, _ = io.WriteString(w, "second\n")
			})))

			req, _ := http.NewRequest("POST", srv.URL+"/stream", strings.NewReader(`{}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set(idemhttp.HeaderKey, "k")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			br := bufio.NewReader(resp.Body)
			// The handler is still blocked: only a flush can have sent this.
			line, err := br.ReadString('\n')
			if err != nil || line != "first\n" {
				t.Fatalf("first line %q, %v", line, err)
			}
			close(proceed)
			rest, _ := io.ReadAll(br)
			if string(rest) != "second\n" {
				t.Fatalf("rest %q", rest)
			}
			resp.Body.Close()
			r := send(t, "POST", srv.URL+"/stream", "k", `{}`)
			if r.body != "first\nsecond\n" || r.header.Get(idemhttp.HeaderReplayed) != "true" {
				t.Fatalf("replay %q %v", r.body, r.header)
			}
		})
	}
}

func TestMiddleware_Panic(t *testing.T) {
	for _, value := range []any{"boom", http.ErrAbortHandler} {
		t.Run(fmt.Sprint(value), func(t *testing.T) {
			store := newStore(t, nil)
			var runs atomic.Int32
			mw := idemhttp.Middleware(store, shared())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if runs.Add(1) == 1 {
					panic(value)
				}
				w.WriteHeader(http.StatusCreated)
			}))
			caught := make(chan any, 1)
			srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				defer func() {
					p := recover()
					caught <- p
					if p != nil {
						panic(p)
					}
				}()
				mw.ServeHTTP(w, r)
			}))
			client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
			req, _ := http.NewRequest("POST", srv.URL+"/x", strings.NewReader(`{}`))
			req.Header.Set(idemhttp.HeaderKey, "k")
			if resp, err := client.Do(req); err == nil {
				resp.Body.Close()
				t.Fatalf("a panicking handler answered %d", resp.StatusCode)
			}
			if p := <-caught; p != value {
				t.Fatalf("re-raised %v, want %v", p, value)
			}
			if rec := recordGet(t, store, "", "k"); rec.State != idem.StateReleased {
				t.Fatalf("record state %v, want released", rec.State)
			}
			if r := send(t, "POST", srv.URL+"/x", "k", `{}`); r.status != http.StatusCreated || runs.Load() != 2 {
				t.Fatalf("retry after the panic: %d, %d runs", r.status, runs.Load())
			}
		})
	}
}

func TestMiddleware_ServerErrorReleased(t *testing.T) {
	store := newStore(t, nil)
	var runs atomic.Int32
	srv := newServer(t, idemhttp.Middleware(store, shared())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			http.Error(w, "downstream failed", http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})))
	if r := send(t, "POST", srv.URL+"/x", "k", `{}`); r.status != http.StatusBadGateway {
		t.Fatalf("first: %d", r.status)
	}
	if r := send(t, "POST", srv.URL+"/x", "k", `{}`); r.status != http.StatusCreated || r.header.Get(idemhttp.HeaderReplayed) != "" {
		t.Fatalf("second: %d %v", r.status, r.header)
	}
	if r := send(t, "POST", srv.URL+"/x", "k", `{}`); r.status != http.StatusCreated || r.header.Get(idemhttp.HeaderReplayed) != "true" {
		t.Fatalf("third: %d %v", r.status, r.header)
	}
}

func TestMiddleware_StatusPolicy(t *testing.T) {
	store := newStore(t, &idem.Options{Policy: idemhttp.StatusPolicy})
	var runs atomic.Int32
	srv := newServer(t, idemhttp.Middleware(store, shared())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})))
	send(t, "POST", srv.URL+"/x", "k", `{}`)
	if r := send(t, "POST", srv.URL+"/x", "k", `{}`); r.status != http.StatusCreated || runs.Load() != 2 {
		t.Fatalf("after a 429: %d, %d runs", r.status, runs.Load())
	}
}

func TestMiddleware_NoWriteHeader(t *testing.T) {
	store := newStore(t, nil)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /silent", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("POST /sniffed", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "<html><body>done</body></html>")
	})
	srv := newServer(t, idemhttp.Middleware(store, shared())(mux))

	for _, path := range []string{"/silent", "/sniffed"} {
		first := send(t, "POST", srv.URL+path, path, `{}`)
		again := send(t, "POST", srv.URL+path, path, `{}`)
		if first.status != http.StatusOK || again.status != http.StatusOK || first.body != again.body {
			t.Fatalf("%s: first %d %q, again %d %q", path, first.status, first.body, again.status, again.body)
		}
		if first.header.Get("Content-Type") != again.header.Get("Content-Type") {
			t.Fatalf("%s: Content-Type %q then %q", path, first.header.Get("Content-Type"), again.header.Get("Content-Type"))
		}
		if again.header.Get(idemhttp.HeaderReplayed) != "true" {
			t.Fatalf("%s: not replayed", path)
		}
	}
}

func TestMiddleware_ResponseTooLargeToKeep(t *testing.T) {
	store := newStore(t, nil)
	var runs atomic.Int32
	srv := newServer(t, idemhttp.Middleware(store, &idemhttp.Options{Scope: idemhttp.SharedScope, MaxResponseBytes: 8})(http.HandlerFunc(
		func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			w.WriteHeader(http.StatusAccepted)
			for range 10 {
				_, _ = io.WriteString(w, "0123456789")
			}
		})))
	first := send(t, "POST", srv.URL+"/export", "k", `{}`)
	if first.status != http.StatusAccepted || first.body != strings.Repeat("0123456789", 10) {
		t.Fatalf("first: %d %q", first.status, first.body)
	}
	r := send(t, "POST", srv.URL+"/export", "k", `{}`)
	p := r.problem(t)
	if r.status != http.StatusAccepted || p.Type != idemhttp.ProblemResponseNotKept || r.header.Get(idemhttp.HeaderReplayed) != "true" {
		t.Fatalf("repeat: %d %+v %v", r.status, p, r.header)
	}
	if runs.Load() != 1 {
		t.Fatalf("ran %d times", runs.Load())
	}
	if rec := recordGet(t, store, "", "k"); !rec.Result.Truncated || len(rec.Result.Body) != 0 {
		t.Fatalf("saved result %+v", rec.Result)
	}
}

func TestMiddleware_ConcurrentDuplicates(t *testing.T) {
	const n = 64
	t.Run("409", func(t *testing.T) {
		store := newStore(t, nil)
		release := make(chan struct{})
		var runs atomic.Int32
		srv := newServer(t, idemhttp.Middleware(store, shared())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			<-release
			w.WriteHeader(http.StatusCreated)
		})))
		replies := make(chan reply, n)
		for range n {
			go func() { replies <- send(t, "POST", srv.URL+"/x", "k", `{"same":true}`) }()
		}
		counts := map[int]int{}
		// n-1 requests meet the one running; then it may finish.
		for range n - 1 {
			counts[(<-replies).status]++
		}
		close(release)
		counts[(<-replies).status]++
		if counts[http.StatusCreated] != 1 || counts[http.StatusConflict] != n-1 || runs.Load() != 1 {
			t.Fatalf("statuses %v, %d runs", counts, runs.Load())
		}
	})
	t.Run("wait", func(t *testing.T) {
		store := newStore(t, nil)
		var runs atomic.Int32
		srv := newServer(t, idemhttp.Middleware(store, &idemhttp.Options{Scope: idemhttp.SharedScope, Wait: time.Minute})(http.HandlerFunc(
			func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusCreated)
				fmt.Fprintf(w, "run %d", runs.Add(1))
			})))
		var wg sync.WaitGroup
		replies := make(chan reply, n)
		for range n {
			wg.Go(func() { replies <- send(t, "POST", srv.URL+"/x", "k", `{"same":true}`) })
		}
		wg.Wait()
		close(replies)
		for r := range replies {
			if r.status != http.StatusCreated || r.body != "run 1" {
				t.Fatalf("got %d %q", r.status, r.body)
			}
		}
		if runs.Load() != 1 {
			t.Fatalf("%d runs", runs.Load())
		}
	})
}

func TestMiddleware_BadConfigurationPanics(t *testing.T) {
	store := newStore(t, nil)
	for name, tc := range map[string]struct {
		store *idem.Store
		opts  *idemhttp.Options
	}{
		"nil store":          {nil, shared()},
		"nil options":        {store, nil},
		"no scope":           {store, &idemhttp.Options{MaxBodyBytes: 1 << 10}},
		"negative body":      {store, &idemhttp.Options{Scope: idemhttp.SharedScope, MaxBodyBytes: -1}},
		"negative response":  {store, &idemhttp.Options{Scope: idemhttp.SharedScope, MaxResponseBytes: -1}},
		"negative wait":      {store, &idemhttp.Options{Scope: idemhttp.SharedScope, Wait: -time.Second}},
		"unknown status 200": {store, &idemhttp.Options{Scope: idemhttp.SharedScope, UnknownStatus: 200}},
		"empty method":       {store, &idemhttp.Options{Scope: idemhttp.SharedScope, Methods: []string{""}}},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			idemhttp.Middleware(tc.store, tc.opts)
		})
	}
}

// TestMiddleware_LeaseExtended checks that a handler running far longer
// than the lease keeps its claim: the lease is extended every Lease/3, so
// a repeat meets a live claim (409), never a stale one to recover.
func TestMiddleware_LeaseExtended(t *testing.T) {
	clock := newClock()
	store := newStore(t, &idem.Options{Clock: clock, Lease: 3 * time.Second})
	started, release := make(chan struct{}), make(chan struct{})
	var runs atomic.Int32
	srv := newServer(t, idemhttp.Middleware(store, shared())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		close(started)
		<-release
		w.WriteHeader(http.StatusCreated)
	})))
	first := make(chan reply, 1)
	go func() { first <- send(t, "POST", srv.URL+"/x", "k", `{}`) }()
	<-started
	// Each heartbeat waits a second on the clock; move it on as each one
	// starts waiting: ten seconds, more than three leases.
	for range 10 {
		clock.BlockUntil(1)
		clock.Advance(time.Second)
	}
	r := send(t, "POST", srv.URL+"/x", "k", `{}`)
	if p := r.problem(t); r.status != http.StatusConflict || p.Type != idemhttp.ProblemInProgress {
		t.Fatalf("repeat during a long run: %d %+v", r.status, p)
	}
	close(release)
	if f := <-first; f.status != http.StatusCreated || runs.Load() != 1 {
		t.Fatalf("first: %d, %d runs", f.status, runs.Load())
	}
}

func TestMiddleware_CanonicalJSON(t *testing.T) {
	store := newStore(t, nil)
	h := &counter{}
	srv := newServer(t, idemhttp.Middleware(store, shared())(h))

	send(t, "POST", srv.URL+"/refunds", "k", `{"order":"o-1","amount":"12.50","meta":{"a":1,"b":[1,2]}}`)
	// The same request in other words: members reordered, whitespace, escapes.
	r := send(t, "POST", srv.URL+"/refunds", "k", "{ \"meta\" : {\"b\":[1, 2], \"a\":1},\n \"amount\":\"12.50\", \"order\":\"o-\\u0031\" }",
		"Content-Type", "application/json; charset=utf-8")
	if r.status != http.StatusCreated || r.header.Get(idemhttp.HeaderReplayed) != "true" || h.count() != 1 {
		t.Fatalf("same JSON in other words: %d %s, %d runs", r.status, r.body, h.count())
	}
	// Array order is meaning.
	r = send(t, "POST", srv.URL+"/refunds", "k", `{"order":"o-1","amount":"12.50","meta":{"a":1,"b":[2,1]}}`)
	if r.status != http.StatusUnprocessableEntity || h.count() != 1 {
		t.Fatalf("reordered array: %d, %d runs", r.status, h.count())
	}
}

func TestMiddleware_InvalidBody(t *testing.T) {
	store := newStore(t, nil)
	h := &counter{}
	srv := newServer(t, idemhttp.Middleware(store, &idemhttp.Options{Scope: idemhttp.SharedScope, MaxJSONDepth: 3})(h))

	for name, body := range map[string]string{
		"duplicate member": `{"secret_member":"1.00","secret_member":"9.00"}`,
		"malformed":        `{"amount":`,
		"too deep":         `{"a":{"b":{"c":{"d":1}}}}`,
	} {
		t.Run(name, func(t *testing.T) {
			r := send(t, "POST", srv.URL+"/x", "k-"+name, body)
			p := r.problem(t)
			if r.status != http.StatusBadRequest || p.Type != idemhttp.ProblemInvalidBody || strings.Contains(r.body, "secret") {
				t.Fatalf("got %d %s", r.status, r.body)
			}
		})
	}
	if h.count() != 0 {
		t.Fatalf("handler ran %d times", h.count())
	}
}
