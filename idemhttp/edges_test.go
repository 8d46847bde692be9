package idemhttp_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/badgerstore"
	"github.com/idemkit/idem/idemhttp"
)

// noCompleteBackend fails every Complete, as a disk that went away while
// the handler ran.
type noCompleteBackend struct{ backend.Backend }

func (noCompleteBackend) Complete(context.Context, string, string, uint64, backend.Completion) error {
	return fmt.Errorf("%w: disk went away", idem.ErrUnavailable)
}

// TestMiddleware_OutcomeNotRecorded: the handler ran and its outcome could
// not be saved. The client gets 500 outcome-not-recorded, not the
// handler's response, which the record does not hold (and never 503 "safe
// to retry"); OnError hears of it, and a retry does not run it again.
func TestMiddleware_OutcomeNotRecorded(t *testing.T) {
	b, err := badgerstore.Open("", badgerstore.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	store := idem.New(noCompleteBackend{b}, &idem.Options{SweepInterval: -1})
	t.Cleanup(func() { _ = store.Close() })
	var mu sync.Mutex
	var seen []error
	var problems []string
	o := shared()
	o.OnError = func(_ *http.Request, err error, p *idemhttp.Problem) {
		mu.Lock()
		seen = append(seen, err)
		problems = append(problems, p.Type)
		mu.Unlock()
	}
	h := &counter{}
	srv := newServer(t, idemhttp.Middleware(store, o)(h))
	r := send(t, "POST", srv.URL+"/x", "k", `{}`)
	if p := r.problem(t); r.status != http.StatusInternalServerError || p.Type != idemhttp.ProblemOutcomeNotRecorded {
		t.Fatalf("got %d %+v, want 500 outcome-not-recorded", r.status, p)
	}
	if r.header.Get("Location") != "" || r.header.Get("Retry-After") != "" {
		t.Fatalf("the handler's headers are dropped with its response: %v", r.header)
	}
	mu.Lock()
	if len(seen) != 1 || !errors.Is(seen[0], idem.ErrOutcomeNotRecorded) || errors.Is(seen[0], idem.ErrUnavailable) ||
		problems[0] != idemhttp.ProblemOutcomeNotRecorded {
		t.Fatalf("OnError got %v %v", seen, problems)
	}
	mu.Unlock()
	r = send(t, "POST", srv.URL+"/x", "k", `{}`)
	if r.status != http.StatusConflict || h.count() != 1 {
		t.Fatalf("retry: %d after %d runs; want 409 and one run", r.status, h.count())
	}
}

// TestMiddleware_MultipartBoundary: the same bytes sent with another
// multipart boundary parse to another form, so the key's reuse is a
// mismatch (422), never the first form's replay.
func TestMiddleware_MultipartBoundary(t *testing.T) {
	store := newStore(t, nil)
	h := &counter{}
	srv := newServer(t, idemhttp.Middleware(store, shared())(h))
	body := "--A\r\nContent-Disposition: form-data; name=\"amount\"\r\n\r\n5\r\n--B\r\n--A--\r\n--B--\r\n"
	first := send(t, "POST", srv.URL+"/upload", "k", body, "Content-Type", "multipart/form-data; boundary=A")
	again := send(t, "POST", srv.URL+"/upload", "k", body, "Content-Type", "multipart/form-data; boundary=A")
	other := send(t, "POST", srv.URL+"/upload", "k", body, "Content-Type", "multipart/form-data; boundary=B")
	if first.status != http.StatusCreated || again.header.Get(idemhttp.HeaderReplayed) != "true" {
		t.Fatalf("first %d, again %d %v", first.status, again.status, again.header)
	}
	if p := other.problem(t); other.status != http.StatusUnprocessableEntity || p.Type != idemhttp.ProblemMismatch {
		t.Fatalf("another boundary: %d %+v", other.status, p)
	}
	if h.count() != 1 {
		t.Fatalf("handler ran %d times", h.count())
	}
}
