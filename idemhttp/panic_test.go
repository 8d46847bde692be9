package idemhttp_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
)

// abortServer serves a handler that acts (writes its ledger line) and then
// panics with http.ErrAbortHandler on its first run, and answers 201 on
// later ones. It reports what the middleware re-raised on caught.
func abortServer(t *testing.T, store *idem.Store, l *ledger) (string, <-chan any) {
	t.Helper()
	var runs atomic.Int32
	mw := idemhttp.Middleware(store, shared())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.act("k")
		if runs.Add(1) == 1 {
			panic(http.ErrAbortHandler)
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte("second run"))
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
	return srv.URL, caught
}

// sendAborted sends the first request and waits for the middleware to
// re-raise the handler's panic.
func sendAborted(t *testing.T, url string, caught <-chan any) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	req, _ := http.NewRequest("POST", url+"/refunds", strings.NewReader(`{}`))
	req.Header.Set(idemhttp.HeaderKey, "k")
	req.Header.Set("Content-Type", "application/json")
	if resp, err := client.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("an aborted handler answered %d", resp.StatusCode)
	}
	if p := <-caught; p != http.ErrAbortHandler {
		t.Fatalf("re-raised %v, want http.ErrAbortHandler", p)
	}
}

func TestMiddleware_AbortHandler_HeldForResolver(t *testing.T) {
	clock := newClock()
	var l ledger
	var asked atomic.Int32
	resolver := idem.ResolverFunc(func(ctx context.Context, rec *idem.Record) (idem.Resolution, error) {
		asked.Add(1)
		if l.count(rec.Key) == 0 {
			return idem.Resolution{Verdict: idem.VerdictNotCommitted}, nil
		}
		return idem.Resolution{Verdict: idem.VerdictCommitted, Result: idem.Result{Status: http.StatusCreated,
			Header: map[string][]string{"Content-Type": {"text/plain"}}, Body: []byte("from the ledger")}}, nil
	})
	store := newDiskStore(t, &idem.Options{Clock: clock, Resolver: resolver})
	url, caught := abortServer(t, store, &l)
	sendAborted(t, url, caught)

	rec := recordGet(t, store, "", "k")
	if rec.State != idem.StateInProgress || !rec.Stale(clock.Now()) {
		t.Fatalf("record %v, lease ends %v at %v: want held, in progress with its lease ended",
			rec.State, rec.LeaseEnds, clock.Now())
	}
	if asked.Load() != 0 {
		t.Fatalf("the Resolver was asked %d times before any access", asked.Load())
	}

	// The panic may have left a write in flight: the Resolver is asked
	// once the grace is over.
	clock.Advance(store.Options().RecoveryGrace)
	r := send(t, "POST", url+"/refunds", "k", `{}`)
	if r.status != http.StatusCreated || r.body != "from the ledger" || r.header.Get(idemhttp.HeaderReplayed) != "true" {
		t.Fatalf("repeat: %d %q %v, want the Resolver's result replayed", r.status, r.body, r.header)
	}
	if n := l.count("k"); n != 1 {
		t.Fatalf("the effect ran %d times, want 1", n)
	}
	if asked.Load() != 1 {
		t.Fatalf("the Resolver was asked %d times, want 1", asked.Load())
	}
	rec = recordGet(t, store, "", "k")
	if len(rec.Attempts) != 1 || rec.Attempts[0].Reason != "panic" || rec.Attempts[0].Outcome != "recovered: committed" {
		t.Fatalf("story %+v, want one attempt recovered after a panic", rec.Attempts)
	}
}

// Without a Resolver nobody could ever say whether the aborted handler
// acted, so its claim is released: the retry runs the handler again.
func TestMiddleware_AbortHandler_NoResolverReleases(t *testing.T) {
	var l ledger
	store := newDiskStore(t, &idem.Options{Clock: newClock()})
	url, caught := abortServer(t, store, &l)
	sendAborted(t, url, caught)
	if rec := recordGet(t, store, "", "k"); rec.State != idem.StateReleased {
		t.Fatalf("record state %v, want released", rec.State)
	}
	r := send(t, "POST", url+"/refunds", "k", `{}`)
	if r.status != http.StatusCreated || r.body != "second run" || r.header.Get(idemhttp.HeaderReplayed) != "" {
		t.Fatalf("retry: %d %q %v, want a second run", r.status, r.body, r.header)
	}
	if n := l.count("k"); n != 2 {
		t.Fatalf("the effect ran %d times, want 2 (released, as documented)", n)
	}
}
