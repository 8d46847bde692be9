package idemhttp_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/badgerstore"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemtest"
)

// sharedBackend lets two Stores share one Badger backend (the test closes
// it), keeping its LateCompleter.
type sharedBackend struct{ *badgerstore.Backend }

func (sharedBackend) Close() error { return nil }

const lateLease = 10 * time.Second

// lateSetup serves a paused handler through a Store "a", with a second
// Store "b" on the same Badger store and fake clock standing for another
// instance whose sweep releases a's claim once its lease ended (its
// Resolver says "not committed"). The handler answers 201 once resume is
// closed; it waits, ignoring its context, as a process paused past its
// lease.
type lateSetup struct {
	clock          *idemtest.Clock
	a, b           *idem.Store
	url            string
	started        chan struct{}
	resume         chan struct{}
	mu             sync.Mutex // guards errs
	errs           []error    // what OnError got
	streamResponse bool
}

func newLateSetup(t *testing.T, stream bool) *lateSetup {
	t.Helper()
	bk, err := badgerstore.Open(t.TempDir(), badgerstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bk.Close() })
	s := &lateSetup{clock: newClock(), started: make(chan struct{}), resume: make(chan struct{}), streamResponse: stream}
	notCommitted := idem.ResolverFunc(func(context.Context, *idem.Record) (idem.Resolution, error) {
		return idem.Resolution{Verdict: idem.VerdictNotCommitted}, nil
	})
	open := func(owner string, r idem.Resolver) *idem.Store {
		st := idem.New(sharedBackend{bk}, &idem.Options{Clock: s.clock, Lease: lateLease, SweepInterval: -1,
			Owner: owner, Resolver: r, RecoveryGrace: -1})
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	s.a, s.b = open("a", nil), open("b", notCommitted)
	o := shared()
	o.OnError = func(_ *http.Request, err error, _ *idemhttp.Problem) {
		s.mu.Lock()
		s.errs = append(s.errs, err)
		s.mu.Unlock()
	}
	var once sync.Once
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		w.Header().Set("Location", "/refunds/late")
		w.WriteHeader(http.StatusCreated)
		if s.streamResponse {
			w.(http.Flusher).Flush()
		}
		once.Do(func() { close(s.started) })
		<-s.resume
		_, _ = io.WriteString(w, `{"refund":"late"}`)
	})
	s.url = newServer(t, idemhttp.Middleware(s.a, o)(h)).URL + "/refunds"
	return s
}

// pause sends a request with key k, waits for its handler to run, and
// lets b's sweep release the claim. The reply arrives once resume closes.
func (s *lateSetup) pause(t *testing.T, key string) <-chan reply {
	t.Helper()
	out := make(chan reply, 1)
	go func() { out <- send(t, "POST", s.url, key, `{"amount":5}`) }()
	<-s.started
	s.clock.Advance(lateLease)
	rep, err := s.b.Sweep(context.Background())
	if err != nil || rep.NotCommitted != 1 {
		t.Fatalf("sweep: %+v %v", rep, err)
	}
	return out
}

func (s *lateSetup) onErrors() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]error(nil), s.errs...)
}

// The handler's claim was recovered while it ran, and nobody claimed the
// key since: its response is recorded late, and sent.
func TestMiddleware_LateCompletion_RecordedIsSent(t *testing.T) {
	s := newLateSetup(t, false)
	replyc := s.pause(t, "k")
	close(s.resume)
	r := <-replyc
	if r.status != http.StatusCreated || r.body != `{"refund":"late"}` || r.header.Get("Location") != "/refunds/late" {
		t.Fatalf("got %d %q %v, want the handler's 201", r.status, r.body, r.header)
	}
	again := send(t, "POST", s.url, "k", `{"amount":5}`)
	if again.status != http.StatusCreated || again.header.Get(idemhttp.HeaderReplayed) != "true" || again.body != r.body {
		t.Fatalf("repeat: %d %v %q, want the late response replayed", again.status, again.header, again.body)
	}
	if errs := s.onErrors(); len(errs) != 0 {
		t.Fatalf("OnError got %v", errs)
	}
}

// The handler's claim was recovered and another attempt claimed the key
// before the handler finished: its response is not the recorded one and is
// not sent. The client gets 409 ran-twice; a retry gets the other
// attempt's outcome.
func TestMiddleware_LateCompletion_RanTwiceIsNotSent(t *testing.T) {
	ctx := context.Background()
	s := newLateSetup(t, false)
	replyc := s.pause(t, "k")
	fp := recordGet(t, s.b, "", "k").Fingerprint
	newer, _, err := s.b.Begin(ctx, idem.Request{Key: "k", Fingerprint: fp})
	if err != nil || newer == nil {
		t.Fatalf("the other attempt's claim: %v", err)
	}
	close(s.resume)
	r := <-replyc
	p := r.problem(t)
	if r.status != http.StatusConflict || p.Type != idemhttp.ProblemRanTwice || r.header.Get("Retry-After") != "1" {
		t.Fatalf("got %d %+v %v, want 409 ran-twice with Retry-After", r.status, p, r.header)
	}
	if r.header.Get("Location") != "" {
		t.Fatalf("the handler's headers went out with the problem: %v", r.header)
	}
	errs := s.onErrors()
	if len(errs) != 1 || !errors.Is(errs[0], idem.ErrRanTwice) || !errors.Is(errs[0], idem.ErrOutcomeNotRecorded) {
		t.Fatalf("OnError got %v", errs)
	}
	if again := send(t, "POST", s.url, "k", `{"amount":5}`); again.status != http.StatusConflict ||
		again.problem(t).Type != idemhttp.ProblemInProgress {
		t.Fatalf("while the other attempt runs: %d %q, want 409 in-progress", again.status, again.body)
	}
	if err := newer.Complete(ctx, idem.Result{Status: http.StatusOK, Body: []byte(`{"refund":"newer"}`)}); err != nil {
		t.Fatal(err)
	}
	again := send(t, "POST", s.url, "k", `{"amount":5}`)
	if again.status != http.StatusOK || again.body != `{"refund":"newer"}` || again.header.Get(idemhttp.HeaderReplayed) != "true" {
		t.Fatalf("retry: %d %q, want the other attempt's outcome replayed", again.status, again.body)
	}
	if !recordGet(t, s.b, "", "k").MayHaveRunTwice {
		t.Fatal("the key is not marked")
	}
}

// A response that was already streaming cannot be taken back: it goes
// out whole, and OnError hears that it may have run twice.
func TestMiddleware_LateCompletion_RanTwiceWhileStreaming(t *testing.T) {
	ctx := context.Background()
	s := newLateSetup(t, true)
	replyc := s.pause(t, "k")
	fp := recordGet(t, s.b, "", "k").Fingerprint
	if _, _, err := s.b.Begin(ctx, idem.Request{Key: "k", Fingerprint: fp}); err != nil {
		t.Fatal(err)
	}
	close(s.resume)
	r := <-replyc
	if r.status != http.StatusCreated || r.body != `{"refund":"late"}` {
		t.Fatalf("got %d %q, want the streamed 201", r.status, r.body)
	}
	if errs := s.onErrors(); len(errs) != 1 || !errors.Is(errs[0], idem.ErrRanTwice) {
		t.Fatalf("OnError got %v", errs)
	}
}
