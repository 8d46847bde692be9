package idemotel_test

import (
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/codes"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemotel"
)

// send POSTs a JSON body with key (none if empty) and reads the answer.
func send(url, key, body string) (*http.Response, string, error) {
	rq, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return nil, "", err
	}
	rq.Header.Set("Content-Type", "application/json")
	if key != "" {
		rq.Header.Set(idemhttp.HeaderKey, key)
	}
	resp, err := http.DefaultClient.Do(rq)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

func post(t *testing.T, url, key, body string) (*http.Response, string) {
	t.Helper()
	resp, b, err := send(url, key, body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// serve serves h, wrapped in the Telemetry's middleware around idemhttp's,
// on 127.0.0.1, for requests in scope tenant-a.
func serve(t *testing.T, r *rig, h http.Handler) string {
	t.Helper()
	scope := func(*http.Request) (string, error) { return "tenant-a", nil }
	mw := r.tel.Middleware(r.store, idemhttp.Middleware(r.store, &idemhttp.Options{Scope: scope}))
	srv := httptest.NewUnstartedServer(mw(h))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestTelemetry_Middleware(t *testing.T) {
	r := newRig(t, nil, nil)
	started, release := make(chan uint64, 1), make(chan struct{})
	refunds := http.HandlerFunc(func(w http.ResponseWriter, rq *http.Request) {
		if c, ok := idem.ClaimFromContext(rq.Context()); ok {
			started <- c.Token()
			<-release
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"refund":"re_1"}`)
	})
	url := serve(t, r, refunds)

	first := make(chan int, 1)
	go func() {
		resp, _, err := send(url, "q-1", `{"amount":5}`)
		if err != nil {
			t.Error(err)
			first <- 0
			return
		}
		first <- resp.StatusCode
	}()
	token := <-started
	if resp, _ := post(t, url, "q-1", `{"amount":5}`); resp.StatusCode != http.StatusConflict {
		t.Errorf("repeat while running: %d, want 409", resp.StatusCode)
	}
	close(release)
	if status := <-first; status != http.StatusCreated {
		t.Fatalf("first request: %d, want 201", status)
	}
	if resp, body := post(t, url, `"q-1"`, `{ "amount": 5 }`); resp.StatusCode != http.StatusCreated ||
		resp.Header.Get(idemhttp.HeaderReplayed) != "true" || body != `{"refund":"re_1"}` {
		t.Errorf("repeat: %d %q", resp.StatusCode, body)
	}
	if resp, _ := post(t, url, "q-1", `{"amount":6}`); resp.StatusCode != http.StatusUnprocessableEntity {
		t.Errorf("other body: %d, want 422", resp.StatusCode)
	}
	if resp, _ := post(t, url, "", `{"amount":5}`); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("no key: %d, want 400", resp.StatusCode)
	}
	// idemhttp lets a GET through untouched, key or not.
	get, _ := http.NewRequest(http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(idemhttp.WithKey(get, "q-2"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	attrs := func(outcome, status string) map[string]string {
		return map[string]string{"idem.scope": "tenant-a", "idem.key.digest": idemotel.KeyDigest("q-1"),
			"idem.outcome": outcome, "idem.token": tok(token), "http.response.status_code": status}
	}
	executed := attrs("executed", "201")
	executed["idem.attempt"], executed["idem.decision"] = "1", "completed"
	name := idemotel.MiddlewareSpanName
	// In the order they ended; the request without a key has no span.
	check(t, "spans", r.ended(), []spanView{
		{Name: name, Attrs: attrs("in_progress", "409")},
		{Name: name, Attrs: executed},
		{Name: name, Attrs: attrs("replayed", "201")},
		{Name: name, Attrs: attrs("mismatch", "422")},
		{Name: name, Attrs: map[string]string{"idem.key.digest": idemotel.KeyDigest("q-2"),
			"idem.outcome": "skipped", "http.response.status_code": "201"}},
	})
	check(t, "metrics", r.metrics(t), map[string]any{
		"idem.executions": int64(1),
		"idem.replays":    int64(1),
		"idem.rejections[idem.rejection=in_progress]":   int64(1),
		"idem.rejections[idem.rejection=mismatch]":      int64(1),
		"idem.commit.duration[idem.operation=claim]":    hist{1, 0},
		"idem.commit.duration[idem.operation=complete]": hist{1, 0},
		"idem.claim.age[idem.decision=completed]":       hist{1, 0},
	})
}

// TestTelemetry_Do_Concurrent runs many requests for one key at once: each
// span gets its own request's outcome, though every span watches the key.
func TestTelemetry_Do_Concurrent(t *testing.T) {
	r := newRig(t, nil, nil)
	const n = 8
	release := make(chan struct{})
	var token uint64
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			_, _, err := r.tel.Do(context.Background(), r.store, req, func(ctx context.Context) (idem.Result, error) {
				c, _ := idem.ClaimFromContext(ctx)
				token = c.Token()
				<-release
				return idem.Result{Status: 201}, nil
			})
			errs <- err
		})
	}
	for range n - 1 {
		if err := <-errs; !errors.Is(err, idem.ErrInProgress) {
			t.Errorf("concurrent repeat: %v, want ErrInProgress", err)
		}
	}
	close(release)
	wg.Wait()
	if err := <-errs; err != nil {
		t.Fatalf("the request that ran: %v", err)
	}
	outcomes := map[string]int{}
	for _, s := range r.ended() {
		outcomes[s.Attrs["idem.outcome"]+" token="+s.Attrs["idem.token"]+" decision="+s.Attrs["idem.decision"]]++
	}
	check(t, "outcomes", outcomes, map[string]int{
		"executed token=" + tok(token) + " decision=completed": 1,
		"in_progress token=" + tok(token) + " decision=":       n - 1,
	})
	m := r.metrics(t)
	check(t, "counts", []any{m["idem.executions"], m["idem.rejections[idem.rejection=in_progress]"]},
		[]any{int64(1), int64(n - 1)})
}

// TestTelemetry_Middleware_Refusals reads 503s apart by their problem type:
// an earlier attempt's unknown outcome, and a closed store.
func TestTelemetry_Middleware_Refusals(t *testing.T) {
	// Hold every 202: the outcome stays open for recovery, and no
	// Resolver is configured to settle it.
	hold := func(res idem.Result, err error) idem.Decision {
		if res.Status == http.StatusAccepted {
			return idem.DecisionHold
		}
		return idem.DefaultPolicy(res, err)
	}
	r := newRig(t, &idem.Options{Policy: hold}, nil)
	url := serve(t, r, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusAccepted)
	}))
	if resp, _ := post(t, url, "q-2", `{}`); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("first: %d", resp.StatusCode)
	}
	r.clock.Advance(r.store.Options().RecoveryGrace) // past the grace: the claim is stale, with no one to settle it
	if resp, _ := post(t, url, "q-2", `{}`); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("after hold: %d, want 503", resp.StatusCode)
	}
	if err := r.store.Close(); err != nil {
		t.Fatal(err)
	}
	if resp, _ := post(t, url, "q-3", `{}`); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("closed store: %d, want 503", resp.StatusCode)
	}
	spans := r.ended()
	if len(spans) != 3 {
		t.Fatalf("%d spans, want 3", len(spans))
	}
	token := spans[0].Attrs["idem.token"]
	check(t, "unknown", spans[1], spanView{Name: idemotel.MiddlewareSpanName, Attrs: map[string]string{
		"idem.scope": "tenant-a", "idem.key.digest": idemotel.KeyDigest("q-2"), "idem.outcome": "outcome_unknown",
		"idem.token": token, "http.response.status_code": "503"}})
	check(t, "unavailable", spans[2], spanView{Name: idemotel.MiddlewareSpanName, Status: codes.Error,
		Desc: "idempotency store unavailable", Attrs: map[string]string{"idem.key.digest": idemotel.KeyDigest("q-3"),
			"idem.outcome": "unavailable", "http.response.status_code": "503"}})
	check(t, "held", spans[0].Attrs["idem.decision"], "held")
}
