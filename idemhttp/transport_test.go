package idemhttp_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
)

// hits counts the requests a server got and keeps their bodies.
type hits struct {
	mu     sync.Mutex // guards bodies
	bodies []string
	n      atomic.Int32
}

func (h *hits) sent() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.bodies...)
}

func (h *hits) wrap(next func(n int32, w http.ResponseWriter, r *http.Request)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		h.bodies = append(h.bodies, string(b))
		h.mu.Unlock()
		r.Body = io.NopCloser(strings.NewReader(string(b)))
		next(h.n.Add(1), w, r)
	})
}

// drop answers nothing: the connection is closed after the server acted.
func drop(w http.ResponseWriter) {
	if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
		_ = conn.Close()
	}
}

func problem503(w http.ResponseWriter, typ, retryAfter string) {
	w.Header().Set("Content-Type", idemhttp.ProblemContentType)
	if retryAfter != "" {
		w.Header().Set("Retry-After", retryAfter)
	}
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = io.WriteString(w, `{"type":"`+typ+`","title":"t","status":503}`)
}

// base is a fresh transport without keep-alives, so that net/http's own
// retry of replayable requests on reused connections never adds attempts.
func base() http.RoundTripper { return &http.Transport{DisableKeepAlives: true} }

func post(t testing.TB, c *http.Client, url, key, body string) (*http.Response, string, error) {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req = idemhttp.WithKey(req, key)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

func TestTransport_ResponseDroppedAfterActing(t *testing.T) {
	store := newStore(t, nil)
	h := &counter{}
	var seen hits
	mw := idemhttp.Middleware(store, shared())(h)
	srv := newServer(t, seen.wrap(func(n int32, w http.ResponseWriter, r *http.Request) {
		if n <= 2 {
			mw.ServeHTTP(httptest.NewRecorder(), r) // the refund happens...
			drop(w)                                 // ...and the answer is lost
			return
		}
		mw.ServeHTTP(w, r)
	}))
	clock := newAutoClock()
	client := idemhttp.NewClient(&idemhttp.Transport{Base: base(), Clock: clock})

	resp, body, err := post(t, client, srv.URL+"/refunds", "refund:o-1", `{"amount":"5.00"}`)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusCreated || body != `{"refund":"r1"}` || resp.Header.Get(idemhttp.HeaderReplayed) != "true" {
		t.Fatalf("got %d %q %v", resp.StatusCode, body, resp.Header)
	}
	if h.count() != 1 || seen.n.Load() != 3 || len(clock.Waits()) != 2 {
		t.Fatalf("%d runs, %d attempts, waits %v", h.count(), seen.n.Load(), clock.Waits())
	}
	if b := seen.sent(); !slices.Equal(b, []string{`{"amount":"5.00"}`, `{"amount":"5.00"}`, `{"amount":"5.00"}`}) {
		t.Fatalf("bodies sent %q", b)
	}
}

func TestTransport_RetryAfter(t *testing.T) {
	clock := newAutoClock()
	var seen hits
	srv := newServer(t, seen.wrap(func(n int32, w http.ResponseWriter, r *http.Request) {
		switch n {
		case 1:
			problem503(w, idemhttp.ProblemUnavailable, "7")
		case 2:
			problem503(w, idemhttp.ProblemUnavailable, clock.Now().Add(30*time.Second).Format(http.TimeFormat))
		default:
			w.WriteHeader(http.StatusCreated)
		}
	}))
	client := idemhttp.NewClient(&idemhttp.Transport{Base: base(), Clock: clock})
	resp, _, err := post(t, client, srv.URL, "k", `{}`)
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("%v %v", resp, err)
	}
	if w := clock.Waits(); !slices.Equal(w, []time.Duration{7 * time.Second, 30 * time.Second}) {
		t.Fatalf("waits %v", w)
	}
}

func TestTransport_InProgressThenReplay(t *testing.T) {
	store := newStore(t, nil)
	release := make(chan struct{})
	started := make(chan struct{})
	var runs atomic.Int32
	srv := newServer(t, idemhttp.Middleware(store, shared())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			close(started)
			<-release
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "refund r1")
	})))
	// Another attempt with the same key is already running (an agent loop
	// restarted while the first call was in flight).
	first := make(chan reply, 1)
	go func() { first <- send(t, "POST", srv.URL+"/refunds", "k", `{}`) }()
	<-started

	clock := newAutoClock()
	clock.onWait = func(d time.Duration) {
		if d != time.Second {
			t.Errorf("wait %v, want the 409's Retry-After of 1s", d)
		}
		close(release)
		<-first
	}
	client := idemhttp.NewClient(&idemhttp.Transport{Base: base(), Clock: clock})
	resp, body, err := post(t, client, srv.URL+"/refunds", "k", `{}`)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusCreated || body != "refund r1" || resp.Header.Get(idemhttp.HeaderReplayed) != "true" {
		t.Fatalf("got %d %q %v", resp.StatusCode, body, resp.Header)
	}
	if runs.Load() != 1 {
		t.Fatalf("%d runs", runs.Load())
	}
}

func TestTransport_AttemptTimeout(t *testing.T) {
	var seen hits
	srv := newServer(t, seen.wrap(func(n int32, w http.ResponseWriter, r *http.Request) {
		if n == 1 {
			<-r.Context().Done() // hangs until the client gives up on it
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	clock := newAutoClock()
	client := idemhttp.NewClient(&idemhttp.Transport{Base: base(), Clock: clock, AttemptTimeout: 50 * time.Millisecond})
	resp, _, err := post(t, client, srv.URL, "k", `{"a":1}`)
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("%v %v", resp, err)
	}
	if b := seen.sent(); len(b) != 2 || b[1] != `{"a":1}` {
		t.Fatalf("bodies sent %q", b)
	}
}

func TestTransport_GivesUpAfterMaxAttempts(t *testing.T) {
	var seen hits
	srv := newServer(t, seen.wrap(func(n int32, w http.ResponseWriter, r *http.Request) {
		problem503(w, idemhttp.ProblemUnavailable, "")
	}))
	clock := newAutoClock()
	client := idemhttp.NewClient(&idemhttp.Transport{Base: base(), Clock: clock, MaxAttempts: 3})
	_, _, err := post(t, client, srv.URL+"/refunds", "refund:o-9", `{}`)
	var re *idemhttp.RetryError
	if !errors.As(err, &re) {
		t.Fatalf("error %v (%T), want a *RetryError", err, err)
	}
	if re.Key != "refund:o-9" || re.Attempts != 3 || re.Status != 503 || re.Reason != "attempts" ||
		re.Problem == nil || re.Problem.Type != idemhttp.ProblemUnavailable {
		t.Fatalf("%+v", re)
	}
	if msg := err.Error(); !strings.Contains(msg, `"refund:o-9"`) || !strings.Contains(msg, "3 attempts") {
		t.Fatalf("message %q does not name the key and attempts", msg)
	}
	// http.Client's *url.Error names the method and URL: once is enough.
	if msg := err.Error(); strings.Count(msg, srv.URL) != 1 || strings.Count(msg, "POST")+strings.Count(msg, "Post") != 1 {
		t.Fatalf("message %q repeats the method or URL", msg)
	}
	if re.Sent != 3 {
		t.Fatalf("%d requests sent, want 3", re.Sent)
	}
	if seen.n.Load() != 3 || len(clock.Waits()) != 2 {
		t.Fatalf("%d attempts, waits %v", seen.n.Load(), clock.Waits())
	}
}

func TestTransport_ConnectionErrorsGiveUp(t *testing.T) {
	var seen hits
	srv := newServer(t, seen.wrap(func(n int32, w http.ResponseWriter, r *http.Request) { drop(w) }))
	client := idemhttp.NewClient(&idemhttp.Transport{Base: base(), Clock: newAutoClock(), MaxAttempts: 4})
	_, _, err := post(t, client, srv.URL, "k", `{}`)
	var re *idemhttp.RetryError
	if !errors.As(err, &re) || re.Attempts != 4 || re.Err == nil || re.Status != 0 {
		t.Fatalf("%v", err)
	}
	if seen.n.Load() != 4 {
		t.Fatalf("%d attempts", seen.n.Load())
	}
}

func TestTransport_NeverRetriesUnkeyedUnsafeRequest(t *testing.T) {
	for _, method := range []string{"POST", "PATCH", "PUT", "DELETE"} {
		t.Run(method, func(t *testing.T) {
			var seen hits
			srv := newServer(t, seen.wrap(func(n int32, w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/drop" {
					drop(w)
					return
				}
				problem503(w, idemhttp.ProblemUnavailable, "0")
			}))
			client := idemhttp.NewClient(&idemhttp.Transport{Base: base(), Clock: newAutoClock()})

			req, _ := http.NewRequest(method, srv.URL+"/x", strings.NewReader(`{}`))
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable || seen.n.Load() != 1 {
				t.Fatalf("got %d after %d attempts", resp.StatusCode, seen.n.Load())
			}

			req, _ = http.NewRequest(method, srv.URL+"/drop", strings.NewReader(`{}`))
			_, err = client.Do(req)
			var re *idemhttp.RetryError
			if err == nil || errors.As(err, &re) || seen.n.Load() != 2 {
				t.Fatalf("dropped: %v after %d attempts", err, seen.n.Load())
			}
		})
	}
}

func TestTransport_RetriesSafeMethodWithoutKey(t *testing.T) {
	var seen hits
	srv := newServer(t, seen.wrap(func(n int32, w http.ResponseWriter, r *http.Request) {
		if n == 1 {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		_, _ = io.WriteString(w, "found")
	}))
	client := idemhttp.NewClient(&idemhttp.Transport{Base: base(), Clock: newAutoClock()})
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || seen.n.Load() != 2 {
		t.Fatalf("got %d after %d attempts", resp.StatusCode, seen.n.Load())
	}
}

// onlyReader hides a reader's type, so http.NewRequest sets no GetBody and
// the Transport must buffer the body to send it again.
type onlyReader struct{ io.Reader }

func TestTransport_ResendsBodyWithoutGetBody(t *testing.T) {
	var seen hits
	srv := newServer(t, seen.wrap(func(n int32, w http.ResponseWriter, r *http.Request) {
		if n < 3 {
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	req, _ := http.NewRequest("POST", srv.URL, onlyReader{strings.NewReader(`{"amount":"7.00"}`)})
	if req.GetBody != nil {
		t.Fatal("GetBody set")
	}
	client := idemhttp.NewClient(&idemhttp.Transport{Base: base(), Clock: newAutoClock()})
	resp, err := client.Do(idemhttp.WithKey(req, "k"))
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("%v %v", resp, err)
	}
	resp.Body.Close()
	want := []string{`{"amount":"7.00"}`, `{"amount":"7.00"}`, `{"amount":"7.00"}`}
	if b := seen.sent(); !slices.Equal(b, want) {
		t.Fatalf("bodies %q", b)
	}
}

func TestTransport_Deadline(t *testing.T) {
	var seen hits
	srv := newServer(t, seen.wrap(func(n int32, w http.ResponseWriter, r *http.Request) {
		problem503(w, idemhttp.ProblemUnavailable, "30")
	}))
	clock := newAutoClock()
	client := idemhttp.NewClient(&idemhttp.Transport{Base: base(), Clock: clock, MaxElapsed: 10 * time.Second})
	_, _, err := post(t, client, srv.URL, "k", `{}`)
	var re *idemhttp.RetryError
	if !errors.As(err, &re) || re.Reason != "deadline" || re.Attempts != 1 {
		t.Fatalf("%v", err)
	}
	if len(clock.Waits()) != 0 {
		t.Fatalf("waited %v for a retry past the deadline", clock.Waits())
	}
}

func TestTransport_BackoffFullJitter(t *testing.T) {
	var seen hits
	srv := newServer(t, seen.wrap(func(n int32, w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusGatewayTimeout)
	}))
	var ceilings []time.Duration
	clock := newAutoClock()
	client := idemhttp.NewClient(&idemhttp.Transport{
		Base: base(), Clock: clock, MaxAttempts: 6,
		BaseDelay: 100 * time.Millisecond, MaxDelay: 500 * time.Millisecond,
		Jitter: func(max time.Duration) time.Duration {
			ceilings = append(ceilings, max)
			return max / 2
		},
	})
	_, _, err := post(t, client, srv.URL, "k", `{}`)
	var re *idemhttp.RetryError
	if !errors.As(err, &re) || re.Attempts != 6 || re.Status != http.StatusGatewayTimeout {
		t.Fatalf("%v", err)
	}
	ms := time.Millisecond
	if want := []time.Duration{100 * ms, 200 * ms, 400 * ms, 500 * ms, 500 * ms}; !slices.Equal(ceilings, want) {
		t.Fatalf("ceilings %v, want %v", ceilings, want)
	}
	if want := []time.Duration{50 * ms, 100 * ms, 200 * ms, 250 * ms, 250 * ms}; !slices.Equal(clock.Waits(), want) {
		t.Fatalf("waits %v, want %v", clock.Waits(), want)
	}
}

func TestTransport_OutcomeNeedsAttention(t *testing.T) {
	var seen hits
	srv := newServer(t, seen.wrap(func(n int32, w http.ResponseWriter, r *http.Request) {
		problem503(w, idemhttp.ProblemOutcomeUnknown, "")
	}))
	client := idemhttp.NewClient(&idemhttp.Transport{Base: base(), Clock: newAutoClock()})
	_, _, err := post(t, client, srv.URL, "k", `{}`)
	var re *idemhttp.RetryError
	if !errors.As(err, &re) || re.Reason != "fatal" || re.Attempts != 1 || re.Problem.Type != idemhttp.ProblemOutcomeUnknown {
		t.Fatalf("%v", err)
	}
}

func TestTransport_ContextCanceled(t *testing.T) {
	var seen hits
	srv := newServer(t, seen.wrap(func(n int32, w http.ResponseWriter, r *http.Request) {}))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL, strings.NewReader(`{}`))
	client := idemhttp.NewClient(&idemhttp.Transport{Base: base(), Clock: newAutoClock()})
	_, err := client.Do(idemhttp.WithKey(req, "k"))
	var re *idemhttp.RetryError
	if !errors.As(err, &re) || re.Reason != "canceled" || !errors.Is(err, context.Canceled) {
		t.Fatalf("%v", err)
	}
	if seen.n.Load() != 0 {
		t.Fatalf("%d attempts", seen.n.Load())
	}
}

func TestWithKey(t *testing.T) {
	req, _ := http.NewRequest("POST", "http://127.0.0.1/x", nil)
	keyed := idemhttp.WithKey(req, "k-1")
	if keyed.Header.Get(idemhttp.HeaderKey) != "k-1" || req.Header.Get(idemhttp.HeaderKey) != "" {
		t.Fatalf("WithKey changed the original or did not set the key")
	}
}

// TestTransport_CountsResendsOfNetHTTP checks that RetryError counts the
// requests that reached the server, not only Transport's attempts: Go's
// http.Transport sends a request carrying Idempotency-Key again, on a new
// connection, when the reused keep-alive connection it chose closes
// without a response.
func TestTransport_CountsResendsOfNetHTTP(t *testing.T) {
	var (
		mu    sync.Mutex // guards conns
		conns = map[string]int{}
		posts atomic.Int32
	)
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		conns[r.RemoteAddr]++
		reused := conns[r.RemoteAddr] > 1
		mu.Unlock()
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusNoContent) // warms a keep-alive connection up
			return
		}
		posts.Add(1)
		if reused {
			drop(w) // the server read it, then the connection died
			return
		}
		problem503(w, idemhttp.ProblemUnavailable, "")
	}))
	keepAlive := &http.Transport{MaxIdleConnsPerHost: 1}
	t.Cleanup(keepAlive.CloseIdleConnections)
	req, err := http.NewRequest("GET", srv.URL+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	warm, err := keepAlive.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, warm.Body)
	_ = warm.Body.Close()

	client := idemhttp.NewClient(&idemhttp.Transport{Base: keepAlive, Clock: newAutoClock(), MaxAttempts: 1})
	_, _, err = post(t, client, srv.URL+"/refunds", "refund:o-3", `{"amount":"3.00"}`)
	var re *idemhttp.RetryError
	if !errors.As(err, &re) || re.Status != http.StatusServiceUnavailable {
		t.Fatalf("%v", err)
	}
	if posts.Load() != 2 || re.Attempts != 1 || re.Sent != 2 {
		t.Fatalf("the server got %d requests; RetryError says %d attempts, %d sent", posts.Load(), re.Attempts, re.Sent)
	}
	if msg := err.Error(); !strings.Contains(msg, "1 attempt (2 requests sent)") {
		t.Fatalf("message %q does not say how many requests were sent", msg)
	}
}

// keyEcho records the Idempotency-Key of every request it serves.
type keyEcho struct {
	mu   sync.Mutex // guards keys
	keys []string
}

func (e *keyEcho) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	e.keys = append(e.keys, r.Header.Get(idemhttp.HeaderKey))
	e.mu.Unlock()
}

func (e *keyEcho) last() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.keys[len(e.keys)-1]
}

func TestDownstreamKeys_InsideAnEffect(t *testing.T) {
	echo := &keyEcho{}
	srv := newServer(t, echo)
	s := newStore(t, nil)
	client := &http.Client{Transport: idemhttp.DownstreamKeys{}}
	named := &http.Client{Transport: idemhttp.DownstreamKeys{Name: "payments"}}
	post := func(ctx context.Context, c *http.Client, path, key string) string {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+path, strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		if key != "" {
			req.Header.Set(idemhttp.HeaderKey, key)
		}
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
		if req.Header.Get(idemhttp.HeaderKey) != key {
			t.Fatalf("the caller's request was modified: %v", req.Header)
		}
		return echo.last()
	}
	_, _, err := s.Do(context.Background(), idem.Request{Scope: "s", Key: "k"}, func(ctx context.Context) (idem.Result, error) {
		want, _ := idem.DownstreamKey(ctx, "POST /v1/refunds")
		if got := post(ctx, client, "/v1/refunds?x=1", ""); got != want {
			t.Errorf("default name: key %q, want DownstreamKey(ctx, \"POST /v1/refunds\") = %q", got, want)
		}
		want, _ = idem.DownstreamKey(ctx, "payments")
		if got := post(ctx, named, "/v1/refunds", ""); got != want {
			t.Errorf("Name payments: key %q, want %q", got, want)
		}
		if got := post(ctx, client, "/v1/refunds", "chosen"); got != "chosen" {
			t.Errorf("a request with its own key was sent with %q", got)
		}
		return idem.Result{Status: 200}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Outside an effect the request goes as it is.
	if got := post(context.Background(), client, "/v1/refunds", ""); got != "" {
		t.Fatalf("a request outside an effect was sent with key %q", got)
	}
}
