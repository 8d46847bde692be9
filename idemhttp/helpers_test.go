package idemhttp_test

import (
	"context"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/badgerstore"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemtest"
)

// shared configures the middleware for a single-tenant test server.
func shared() *idemhttp.Options { return &idemhttp.Options{Scope: idemhttp.SharedScope} }

// newStore opens an in-memory store without a background sweep and closes
// it when the test ends.
func newStore(t testing.TB, o *idem.Options) *idem.Store {
	t.Helper()
	var opts idem.Options
	if o != nil {
		opts = *o
	}
	if opts.SweepInterval == 0 {
		opts.SweepInterval = -1
	}
	mem, err := badgerstore.Open("", badgerstore.Options{InMemory: true})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	s := idem.New(mem, &opts)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// newServer serves h on 127.0.0.1 over real TCP, with net/http's panic
// logs discarded.
func newServer(t testing.TB, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// counter is a handler that counts its runs and answers 201 with a JSON
// body naming the run, plus a few headers to save or not.
type counter struct {
	mu   sync.Mutex
	runs int
	body []string // the request bodies it saw
}

func (c *counter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	c.mu.Lock()
	c.runs++
	n := c.runs
	c.body = append(c.body, string(b))
	c.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/refunds/r"+strconv.Itoa(n))
	w.Header().Set("Set-Cookie", "session=secret")
	w.Header().Set("X-Not-Saved", "1")
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, `{"refund":"r`+strconv.Itoa(n)+`"}`)
}

func (c *counter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs
}

func (c *counter) bodies() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.body...)
}

// reply is a response read whole.
type reply struct {
	status int
	header http.Header
	body   string
}

func (r reply) problem(t testing.TB) idemhttp.Problem {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != idemhttp.ProblemContentType {
		t.Fatalf("Content-Type %q, want %q (status %d, body %s)", ct, idemhttp.ProblemContentType, r.status, r.body)
	}
	var p idemhttp.Problem
	if err := json.Unmarshal([]byte(r.body), &p); err != nil {
		t.Fatalf("problem body %q: %v", r.body, err)
	}
	if p.Status != r.status {
		t.Fatalf("problem status %d, response status %d", p.Status, r.status)
	}
	return p
}

// send makes one request with a plain client; key "" sends no key header,
// and extra headers are added as given (a Content-Type among them replaces
// the default application/json). It may run on any goroutine: a
// failure is reported with t.Errorf and gives a reply with status -1.
func send(t testing.TB, method, url, key, body string, extra ...string) reply {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Errorf("%s %s: %v", method, url, err)
		return reply{status: -1}
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set(idemhttp.HeaderKey, key)
	}
	for i := 0; i+1 < len(extra); i += 2 {
		if http.CanonicalHeaderKey(extra[i]) == "Content-Type" {
			req.Header.Set(extra[i], extra[i+1])
			continue
		}
		req.Header.Add(extra[i], extra[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, url, err)
		return reply{status: -1}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Errorf("%s %s: read body: %v", method, url, err)
		return reply{status: -1}
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// newClock returns an idem.Clock that moves only when told.
func newClock() *idemtest.Clock {
	return idemtest.NewClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
}

// autoClock is an idem.Clock for the Transport: every After returns at
// once, moving the clock on by the wait and recording it, so backoff and
// Retry-After are checked without sleeping.
type autoClock struct {
	mu     sync.Mutex // guards now, waits and onWait
	now    time.Time
	waits  []time.Duration
	onWait func(d time.Duration)
}

func newAutoClock() *autoClock {
	return &autoClock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *autoClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *autoClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.waits = append(c.waits, d)
	now, hook := c.now, c.onWait
	c.mu.Unlock()
	if hook != nil {
		hook(d)
	}
	ch := make(chan time.Time, 1)
	ch <- now
	return ch
}

func (c *autoClock) Waits() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.waits...)
}

// recordGet returns the stored record of (scope, key).
func recordGet(t testing.TB, s *idem.Store, scope, key string) *idem.Record {
	t.Helper()
	rec, err := s.Get(context.Background(), scope, key)
	if err != nil {
		t.Fatalf("get %q: %v", key, err)
	}
	return rec
}
