package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/badgerstore"
	"github.com/idemkit/idem/idemhttp"
)

// tokens is the tool server's authentication: the bearer tokens it issued,
// each naming the agent it was issued to. An agent gets a new token when
// its loop restarts, as clients refresh tokens, so the retry of a step
// often carries another token than its first attempt. The key's scope is
// the agent the token names (idemhttp.PrincipalScope), never the token:
// scoped by token, that retry would find no record and refund again.
type tokens struct {
	mu     sync.Mutex        // guards issued and n
	issued map[string]string // token -> agent
	n      int
}

func newTokens() *tokens { return &tokens{issued: map[string]string{}} }

// issue returns a new token for agent; its earlier tokens stay valid.
func (t *tokens) issue(agent string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n++
	tok := fmt.Sprintf("tok-%06d", t.n)
	t.issued[tok] = agent
	return tok
}

// authenticate is the server's authentication layer: it answers 401 to a
// request without a token it issued, and puts the agent a token names in
// the request's context for the idem middleware and the tool.
func (t *tokens) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.mu.Lock()
		agent, ok := t.issued[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]
		t.mu.Unlock()
		if !ok {
			http.Error(w, "unauthenticated", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r.WithContext(idemhttp.WithPrincipal(r.Context(), agent)))
	})
}

// toolServer is the demo's HTTP tool server: one refund tool backed by
// the ledger, behind the idem middleware or (to compare) bare. It can be
// crashed and restarted; with idem the store is reopened from its
// directory and recovery resolves the claims the crash left open.
type toolServer struct {
	withIdem bool
	dir      string
	ledger   *ledger
	events   *eventCounts
	tokens   *tokens // outlive a crash, as signed tokens would

	// latMu guards lat, the source of simulated provider latency.
	latMu sync.Mutex
	lat   *rand.Rand

	url        atomic.Pointer[string] // the current base URL
	unrecorded atomic.Int32           // refund handlers past the ledger, not yet answered

	// mu guards srv, store and backend, the running instance.
	mu      sync.Mutex
	srv     *http.Server
	store   *idem.Store
	backend *killable
}

// eventCounts counts the store's events: the idem side of the report.
type eventCounts struct {
	replayed, inProgress, mismatch, committed, notCommitted atomic.Int64
}

func (c *eventCounts) Observe(e idem.Event) {
	switch e.Kind {
	case idem.EventReplayed:
		c.replayed.Add(1)
	case idem.EventInProgress:
		c.inProgress.Add(1)
	case idem.EventMismatch:
		c.mismatch.Add(1)
	case idem.EventRecovered:
		if e.Verdict == idem.VerdictCommitted.String() {
			c.committed.Add(1)
		} else {
			c.notCommitted.Add(1)
		}
	}
}

func newToolServer(withIdem bool, dir string, l *ledger, seed uint64) *toolServer {
	return &toolServer{withIdem: withIdem, dir: dir, ledger: l, events: &eventCounts{}, tokens: newTokens(),
		lat: rand.New(rand.NewPCG(seed, 0x5e7)), // latency only; agents have their own sources
	}
}

// baseURL returns where the server listens now.
func (s *toolServer) baseURL() string {
	if u := s.url.Load(); u != nil {
		return *u
	}
	return ""
}

// start opens the store (with idem) and serves on a fresh 127.0.0.1 port.
func (s *toolServer) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	gen := s.ledger.generation()
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.refund(gen, w, r) })
	var (
		store   *idem.Store
		backend *killable
	)
	if s.withIdem {
		// idem.Open, with a kill switch between the store and the disk.
		b, err := badgerstore.Open(s.dir, badgerstore.Options{})
		if err != nil {
			return err
		}
		backend = &killable{Backend: b}
		store = idem.New(backend, &idem.Options{
			Resolver: idem.ResolverFunc(s.resolve),
			Observer: s.events,
			Policy:   idemhttp.StatusPolicy,
			// After a kill, Close need not wait for requests that can no
			// longer record anything.
			CloseTimeout: time.Millisecond,
		})
		// Each agent's keys are its own: scoped by the agent its token
		// names, which authenticate put in the context.
		h = idemhttp.Middleware(store, &idemhttp.Options{Scope: idemhttp.PrincipalScope})(h)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /tools/refund", s.tokens.authenticate(h))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		if store != nil {
			_ = store.Close()
		}
		return err
	}
	srv := &http.Server{Handler: mux, ErrorLog: log.New(io.Discard, "", 0), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	s.srv, s.store, s.backend = srv, store, backend
	u := "http://" + ln.Addr().String()
	s.url.Store(&u)
	return nil
}

// crash kills the running instance as a crash would, all at one instant:
// the ledger takes no more of its refunds and its store writes nothing more
// (the claims open now stay open, some after their refund was made). Then
// every connection drops, and the dead store's files are let go, so that
// the next instance can open them.
func (s *toolServer) crash() {
	s.ledger.kill()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.backend != nil {
		s.backend.kill()
	}
	_ = s.srv.Close()
	if s.store != nil {
		_ = s.store.Close()
	}
	s.srv, s.store, s.backend = nil, nil, nil
}

// stop shuts the running instance down gracefully, resolving what the
// crash left that no agent came back for.
func (s *toolServer) stop(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv == nil {
		return nil
	}
	err := s.srv.Shutdown(ctx)
	if s.store != nil {
		if _, serr := s.store.Sweep(ctx); serr != nil && err == nil {
			err = serr
		}
		if cerr := s.store.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	s.srv, s.store, s.backend = nil, nil, nil
	return err
}

// latency returns a simulated delay between lo and hi milliseconds.
func (s *toolServer) latency(lo, hi int) time.Duration {
	s.latMu.Lock()
	defer s.latMu.Unlock()
	return time.Duration(lo*1000+s.lat.IntN((hi-lo)*1000)) * time.Microsecond
}

// refundRequest is the refund tool's input.
type refundRequest struct {
	Order  string `json:"order"`
	Amount string `json:"amount"`
}

// refund is the tool: it asks the provider (the ledger) for a refund and
// answers with it. It knows nothing about idempotency.
func (s *toolServer) refund(gen int, w http.ResponseWriter, r *http.Request) {
	var in refundRequest
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Order == "" || in.Amount == "" {
		http.Error(w, "bad refund request", http.StatusBadRequest)
		return
	}
	time.Sleep(s.latency(1, 4)) // the call to the provider
	// The provider gets the key as the store holds it (a client may send
	// it quoted), so that recovery finds the refund under it.
	agent, _ := idemhttp.PrincipalFromContext(r.Context())
	key, _ := idemhttp.KeyFromContext(r.Context()) // none without idem
	ref, ok := s.ledger.refund(gen, agent, key, in.Order, in.Amount)
	if !ok {
		// This server instance has crashed: a dead process answers nothing.
		panic(http.ErrAbortHandler)
	}
	s.unrecorded.Add(1)
	defer s.unrecorded.Add(-1)
	time.Sleep(s.latency(2, 10)) // writing the receipt, notifying the customer
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(ref)
}

// resolve is recovery's downstream check: a claim left open by the crash
// committed if the ledger holds a refund made under its key.
func (s *toolServer) resolve(_ context.Context, rec *idem.Record) (idem.Resolution, error) {
	ref, ok := s.ledger.lookup(rec.Scope, rec.Key)
	if !ok {
		return idem.Resolution{Verdict: idem.VerdictNotCommitted}, nil
	}
	body, err := json.Marshal(ref)
	if err != nil {
		return idem.Resolution{}, errors.Join(errors.New("encode refund"), err)
	}
	return idem.Resolution{Verdict: idem.VerdictCommitted, Result: idem.Result{
		Status: http.StatusCreated,
		Header: map[string][]string{"Content-Type": {"application/json"}},
		Body:   append(body, '\n'),
	}}, nil
}
