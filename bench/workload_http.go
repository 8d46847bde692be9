package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
)

// httpReplays compares the middleware's replay path with a bare handler
// that writes the same response. Both run in-process: each request is
// built with httptest.NewRequest and answered into an
// httptest.ResponseRecorder by ServeHTTP, with no network in between, so
// the figures are the handlers' own cost.
func (s *Suite) httpReplays(ctx context.Context) error {
	const id = "http-replay"
	s.addWorkload(Workload{ID: id, Title: "HTTP: middleware replay against a bare handler",
		About: fmt.Sprintf("one request = POST /refunds with a %d-byte JSON body through ServeHTTP into an "+
			"httptest.ResponseRecorder (in-process, no network): idemhttp.Middleware on a durable idem store replaying "+
			"one of 100 done keys, or the bare handler writing the same status, header and body; one goroutine",
			len(requestBody)),
		Unit: "ns/op", Reference: "idemhttp replay"})

	dir, err := os.MkdirTemp(s.tmp, "http-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	store, err := idem.Open(dir, idemOptions(idem.Durable, benchResult))
	if err != nil {
		return err
	}
	defer store.Close()

	bare := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(benchResult)
	})
	mw := idemhttp.Middleware(store, &idemhttp.Options{Scope: idemhttp.SharedScope})(bare)
	const keys = 100
	request := func(i int) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/refunds", strings.NewReader(requestBody))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set(idemhttp.HeaderKey, "refund-"+strconv.Itoa(i%keys))
		return r
	}
	for i := range keys { // the first request of each key runs the handler
		w := httptest.NewRecorder()
		mw.ServeHTTP(w, request(i))
		if w.Code != http.StatusCreated {
			return fmt.Errorf("first request: status %d: %s", w.Code, w.Body)
		}
	}
	serve := func(h http.Handler, replay bool) func() error {
		i := 0
		return func() error {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, request(i))
			i++
			if w.Code != http.StatusCreated || w.Body.Len() != len(benchResult) ||
				replay != (w.Header().Get(idemhttp.HeaderReplayed) == "true") {
				return fmt.Errorf("status %d, replayed %q, body %q", w.Code, w.Header().Get(idemhttp.HeaderReplayed), w.Body)
			}
			return nil
		}
	}
	names := []string{"idemhttp replay", "bare handler"}
	fns := []func() error{serve(mw, true), serve(bare, false)}
	return s.microPair(ctx, id, names, fns)
}
