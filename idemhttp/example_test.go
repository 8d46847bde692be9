package idemhttp_test

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/badgerstore"
	"github.com/idemkit/idem/idemhttp"
)

// A refund tool behind the middleware of a single-tenant server: the same
// key twice, one refund.
func ExampleMiddleware() {
	mem, err := badgerstore.Open("", badgerstore.Options{InMemory: true}) // the embedded store, in memory
	if err != nil {
		log.Fatal(err)
	}
	store := idem.New(mem, &idem.Options{})
	defer store.Close()

	var refunds atomic.Int32
	refund := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"refund":"re_%d"}`, refunds.Add(1))
	})
	mux := http.NewServeMux()
	mux.Handle("POST /refunds", idemhttp.Middleware(store, &idemhttp.Options{Scope: idemhttp.SharedScope})(refund))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for range 2 {
		req, _ := http.NewRequest("POST", srv.URL+"/refunds", strings.NewReader(`{"order":"o-1","amount":"12.50"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(idemhttp.HeaderKey, "refund:o-1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%d replayed=%t %s\n", resp.StatusCode, resp.Header.Get(idemhttp.HeaderReplayed) == "true", body)
	}
	fmt.Println("refunds executed:", refunds.Load())
	// Output:
	// 201 replayed=false {"refund":"re_1"}
	// 201 replayed=true {"refund":"re_1"}
	// refunds executed: 1
}

// The Transport retries a keyed request through a 503, honouring its
// Retry-After, and sends the same key and body again.
func ExampleTransport() {
	var attempts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if attempts.Add(1) == 1 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "key %s, body %s", r.Header.Get(idemhttp.HeaderKey), body)
	}))
	defer srv.Close()

	client := &http.Client{Transport: &idemhttp.Transport{MaxAttempts: 3}}
	req, _ := http.NewRequest("POST", srv.URL+"/refunds", strings.NewReader(`{"amount":"12.50"}`))
	resp, err := client.Do(idemhttp.WithKey(req, "refund:o-1"))
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(body))
	fmt.Println("attempts:", attempts.Load())
	// Output:
	// 201 key refund:o-1, body {"amount":"12.50"}
	// attempts: 2
}

// The agent side derives the key once per planned step, from the run and
// the step, so a retry, a restarted loop or a replayed run sends it again.
func ExampleNewClient() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, r.Header.Get(idemhttp.HeaderKey))
	}))
	defer srv.Close()
	client := idemhttp.NewClient(nil)

	runID, step := "run-2f9c", 4
	key := idem.KeyDeriver{}.Step(runID, step, "refund") // stored with the step and its arguments
	for range 2 {
		req, _ := http.NewRequest("POST", srv.URL+"/refunds", strings.NewReader(`{"amount":"12.50"}`))
		resp, err := client.Do(idemhttp.WithKey(req, key))
		if err != nil {
			log.Fatal(err)
		}
		sent, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(string(sent) == key)
	}
	// Output:
	// true
	// true
}

func ExampleWithKey() {
	req, _ := http.NewRequest("POST", "http://127.0.0.1:8080/refunds", nil)
	keyed := idemhttp.WithKey(req, idem.KeyDeriver{}.Effect("run-2f9c", "refund:order-123"))
	fmt.Println(keyed.Header.Get(idemhttp.HeaderKey) != "", req.Header.Get(idemhttp.HeaderKey) == "")
	// Output:
	// true true
}

func ExampleStatusPolicy() {
	mem, err := badgerstore.Open("", badgerstore.Options{InMemory: true}) // the embedded store, in memory
	if err != nil {
		log.Fatal(err)
	}
	store := idem.New(mem, &idem.Options{

		Policy: idemhttp.StatusPolicy, // a 429 is released, not replayed
	})
	defer store.Close()
	for _, status := range []int{201, 409, 429, 503} {
		fmt.Println(status, idemhttp.StatusPolicy(idem.Result{Status: status}, nil))
	}
	// Output:
	// 201 save
	// 409 save
	// 429 release
	// 503 release
}

// Keys scoped by the caller that the server's authentication layer
// verified: two tenants sending the same key and body are two refunds, and
// a tenant's retry after a token refresh still replays its own.
func ExamplePrincipalScope() {
	mem, err := badgerstore.Open("", badgerstore.Options{InMemory: true}) // the embedded store, in memory
	if err != nil {
		log.Fatal(err)
	}
	store := idem.New(mem, &idem.Options{})
	defer store.Close()

	var refunds atomic.Int32
	refund := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "re_%d", refunds.Add(1))
	})
	// The server's own authentication: tokens name subjects, and a
	// refreshed token names the same one.
	subjects := map[string]string{"tok-a1": "tenant-a", "tok-a2": "tenant-a", "tok-b": "tenant-b"}
	authenticate := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			sub, ok := subjects[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]
			if !ok {
				http.Error(w, "unauthenticated", http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r.WithContext(idemhttp.WithPrincipal(r.Context(), sub)))
		})
	}
	keyed := idemhttp.Middleware(store, &idemhttp.Options{Scope: idemhttp.PrincipalScope})
	srv := httptest.NewServer(authenticate(keyed(refund)))
	defer srv.Close()

	for _, token := range []string{"tok-a1", "tok-b", "tok-a2"} {
		req, _ := http.NewRequest("POST", srv.URL+"/refunds", strings.NewReader(`{"order":"o-1"}`))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(idemhttp.WithKey(req, "refund:o-1"))
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%s: %s replayed=%t\n", token, body, resp.Header.Get(idemhttp.HeaderReplayed) == "true")
	}
	// Output:
	// tok-a1: re_1 replayed=false
	// tok-b: re_2 replayed=false
	// tok-a2: re_1 replayed=true
}

// A handler passes the key downstream as the store holds it: a client
// that sends the structured-field form "refund:o-1" means refund:o-1.
func ExampleKeyFromContext() {
	mem, err := badgerstore.Open("", badgerstore.Options{InMemory: true}) // the embedded store, in memory
	if err != nil {
		log.Fatal(err)
	}
	store := idem.New(mem, &idem.Options{})
	defer store.Close()
	refund := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, _ := idemhttp.KeyFromContext(r.Context())
		fmt.Fprintf(w, "header %s, key %s", r.Header.Get(idemhttp.HeaderKey), key)
	})
	srv := httptest.NewServer(idemhttp.Middleware(store, &idemhttp.Options{Scope: idemhttp.SharedScope})(refund))
	defer srv.Close()

	req, _ := http.NewRequest("POST", srv.URL+"/refunds", strings.NewReader(`{}`))
	resp, err := http.DefaultClient.Do(idemhttp.WithKey(req, `"refund:o-1"`))
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(string(body))
	// Output: header "refund:o-1", key refund:o-1
}
