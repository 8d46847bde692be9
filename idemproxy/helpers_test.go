package idemproxy_test

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/badgerstore"
	"github.com/idemkit/idem/idemproxy"
)

// newStore opens an in-memory store as a proxy needs it (idemproxy.Policy
// and a Resolver, HoldResolver when res is nil), without a background
// sweep, and closes it when the test ends.
func newStore(t testing.TB, res idem.Resolver) *idem.Store {
	t.Helper()
	if res == nil {
		res = idemproxy.HoldResolver{}
	}
	mem, err := badgerstore.Open("", badgerstore.Options{InMemory: true})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	// No recovery grace: a held key goes to the resolver at the next
	// request, which these tests make at once (the grace is the Store's,
	// tested in the root package and the conformance suite).
	s := idem.New(mem, &idem.Options{SweepInterval: -1, Policy: idemproxy.Policy, Resolver: res, RecoveryGrace: -1})
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

// newProxy serves a proxy in front of upstream, with store (plain
// forwarding when nil) and the scope header X-Tenant, and returns its URL.
func newProxy(t testing.TB, store *idem.Store, upstream string, edit func(*idemproxy.Options)) string {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	scope, err := idemproxy.ParseScope("header:X-Tenant")
	if err != nil {
		t.Fatal(err)
	}
	o := &idemproxy.Options{Upstream: u, Scope: scope}
	if edit != nil {
		edit(o)
	}
	p, err := idemproxy.New(store, o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return newServer(t, p).URL
}

// refunds is an upstream that counts the refunds it made and answers 201.
type refunds struct{ n atomic.Int64 }

func (rf *refunds) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	n := rf.n.Add(1)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, `{"refund":`+strconv.FormatInt(n, 10)+`,"key":"`+r.Header.Get("Idempotency-Key")+`","asked":`+string(body)+`}`)
}

// post sends a refund through url with key and tenant (none when empty)
// and returns the response with its body read.
func post(t testing.TB, url, key, tenant, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/refunds", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if tenant != "" {
		req.Header.Set("X-Tenant", tenant)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return resp, string(b)
}
