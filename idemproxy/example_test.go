package idemproxy_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/badgerstore"
	"github.com/idemkit/idem/idemproxy"
)

func ExampleNew() {
	runs := 0
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "refund %d", runs)
	}))
	defer upstream.Close()

	mem, _ := badgerstore.Open("", badgerstore.Options{InMemory: true})
	store := idem.New(mem, &idem.Options{Policy: idemproxy.Policy, Resolver: idemproxy.HoldResolver{}})
	defer store.Close()
	u, _ := url.Parse(upstream.URL)
	scope, _ := idemproxy.ParseScope("header:X-Tenant")
	p, err := idemproxy.New(store, &idemproxy.Options{Upstream: u, Scope: scope})
	if err != nil {
		fmt.Println(err)
		return
	}
	proxy := httptest.NewServer(p)
	defer proxy.Close()

	for range 2 {
		req, _ := http.NewRequest("POST", proxy.URL+"/refunds", strings.NewReader(`{"order":"o-1"}`))
		req.Header.Set("Idempotency-Key", "refund:o-1")
		req.Header.Set("X-Tenant", "acme")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%d %s replayed=%s\n", resp.StatusCode, body, resp.Header.Get("Idempotent-Replayed"))
	}
	// Output:
	// 201 refund 1 replayed=
	// 201 refund 1 replayed=true
}
