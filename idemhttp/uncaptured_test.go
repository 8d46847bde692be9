package idemhttp_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
)

// newDiskStore opens a store on disk in t.TempDir(), without a background
// sweep, and closes it when the test ends.
func newDiskStore(t testing.TB, o *idem.Options) *idem.Store {
	t.Helper()
	var opts idem.Options
	if o != nil {
		opts = *o
	}
	if opts.SweepInterval == 0 {
		opts.SweepInterval = -1
	}
	s, err := idem.Open(t.TempDir(), &opts)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// ledger counts the effects a handler performed, per key.
type ledger struct {
	mu sync.Mutex // guards n
	n  map[string]int
}

func (l *ledger) act(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n == nil {
		l.n = map[string]int{}
	}
	l.n[key]++
}

func (l *ledger) count(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n[key]
}

func TestMiddleware_Hijack_NotKept(t *testing.T) {
	store := newDiskStore(t, nil)
	var l ledger
	done := make(chan struct{}, 1) // the middleware returned, its outcome recorded
	mw := idemhttp.Middleware(store, shared())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, _ := idemhttp.KeyFromContext(r.Context())
		l.act(key)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated) // held back by the recorder, never sent
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		_ = conn.Close()
	}))
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mw.ServeHTTP(w, r)
		done <- struct{}{}
	}))

	req, err := http.NewRequest("POST", srv.URL+"/refunds", strings.NewReader(`{"order":1}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(idemhttp.HeaderKey, "k")
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("first request got %d, want the connection closed", resp.StatusCode)
	}
	<-done

	r := send(t, "POST", srv.URL+"/refunds", "k", `{"order":1}`)
	p := r.problem(t)
	if r.status == http.StatusOK || r.status != http.StatusInternalServerError || p.Type != idemhttp.ProblemResponseNotKept {
		t.Fatalf("repeat: %d %+v", r.status, p)
	}
	if r.header.Get(idemhttp.HeaderReplayed) != "true" || p.Key != "k" {
		t.Fatalf("repeat: header %v, problem %+v", r.header, p)
	}
	if n := l.count("k"); n != 1 {
		t.Fatalf("the effect ran %d times, want 1", n)
	}
	if rec := recordGet(t, store, "", "k"); rec.State != idem.StateDone || !rec.Result.Truncated ||
		rec.Result.Status != 0 || len(rec.Result.Body) != 0 {
		t.Fatalf("record %v %+v", rec.State, rec.Result)
	}
}

func TestMiddleware_WriteAround_NotKept(t *testing.T) {
	store := newDiskStore(t, nil)
	var l ledger
	srv := newServer(t, idemhttp.Middleware(store, shared())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.act("k")
		// A writer that unwraps the recorder writes around it.
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			t.Errorf("%T has no Unwrap", w)
			return
		}
		u.Unwrap().WriteHeader(http.StatusAccepted)
		_, _ = u.Unwrap().Write([]byte("streamed around"))
	})))
	first := send(t, "POST", srv.URL+"/x", "k", `{}`)
	if first.status != http.StatusAccepted || first.body != "streamed around" {
		t.Fatalf("first: %d %q", first.status, first.body)
	}
	r := send(t, "POST", srv.URL+"/x", "k", `{}`)
	if p := r.problem(t); p.Type != idemhttp.ProblemResponseNotKept || r.status != http.StatusInternalServerError {
		t.Fatalf("repeat: %d %+v", r.status, p)
	}
	if n := l.count("k"); n != 1 {
		t.Fatalf("the effect ran %d times, want 1", n)
	}
}

func TestMiddleware_Mismatch_MediaType(t *testing.T) {
	store := newDiskStore(t, nil)
	h := &counter{}
	srv := newServer(t, idemhttp.Middleware(store, shared())(h))
	if r := send(t, "POST", srv.URL+"/refunds", "k", `{"order":1}`); r.status != http.StatusCreated {
		t.Fatalf("first: %d %s", r.status, r.body)
	}
	for _, ct := range []string{"", "text/plain"} {
		r := send(t, "POST", srv.URL+"/refunds", "k", `{"order":1}`, "Content-Type", ct)
		p := r.problem(t)
		if r.status != http.StatusUnprocessableEntity || p.Type != idemhttp.ProblemMismatch {
			t.Fatalf("Content-Type %q: %d %+v", ct, r.status, p)
		}
		if !strings.Contains(p.Detail, "media type") {
			t.Fatalf("Content-Type %q: the detail does not name the media type: %q", ct, p.Detail)
		}
	}
	if h.count() != 1 {
		t.Fatalf("ran %d times", h.count())
	}
}
