package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemproxy"
)

// proxyCalls measures idem proxy's cost over real TCP on 127.0.0.1: a
// first call (a new key: the store's durable claim and completion around
// the forwarded request) and a replay through the proxy, against the
// upstream called directly and against plain forwarding (the same proxy
// without a store). One client with keep-alive connections, one goroutine.
func (s *Suite) proxyCalls(ctx context.Context) error {
	const id = "proxy-http"
	s.addWorkload(Workload{ID: id, Title: "idem proxy: first call and replay against direct and plain forwarding",
		About: fmt.Sprintf("one request = POST /refunds with a %d-byte JSON body over TCP on 127.0.0.1 (keep-alive, one "+
			"goroutine) to a Go upstream answering 201 with a %d-byte body: called directly, through idemproxy without a "+
			"store (plain forwarding), through idemproxy on a durable store with a new key each call (first call), or "+
			"replaying one of 100 done keys (replay); store cycle is a lone durable claim and completion on the proxy's "+
			"store, timed beside them", len(requestBody), len(benchResult)),
		Unit: "ns/op", Reference: "proxy first call"})

	store, done, err := s.proxyStore("proxy-")
	if err != nil {
		return err
	}
	defer done()

	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(benchResult)
	}))
	defer upstream.Close()
	u, _ := url.Parse(upstream.URL)
	plain, err := idemproxy.New(nil, &idemproxy.Options{Upstream: u})
	if err != nil {
		return err
	}
	guarded, err := idemproxy.New(store, &idemproxy.Options{Upstream: u, Scope: idemhttp.SharedScope})
	if err != nil {
		return err
	}
	plainSrv, guardedSrv := httptest.NewServer(plain), httptest.NewServer(guarded)
	defer plainSrv.Close()
	defer guardedSrv.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}

	call := func(base, key string, replay bool) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/refunds", strings.NewReader(requestBody))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set(idemhttp.HeaderKey, key)
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusCreated || len(body) != len(benchResult) ||
			replay != (resp.Header.Get(idemhttp.HeaderReplayed) == "true") {
			return fmt.Errorf("%s: status %d, replayed %q, body %q", base, resp.StatusCode,
				resp.Header.Get(idemhttp.HeaderReplayed), body)
		}
		return nil
	}
	const keys = 100
	for i := range keys {
		if err := call(guardedSrv.URL, "done-"+strconv.Itoa(i), false); err != nil {
			return err
		}
	}
	first, replay := 0, 0
	names := []string{"proxy first call", "proxy replay", "plain forwarding", "upstream direct", storeCycle}
	fns := []func() error{
		func() error { first++; return call(guardedSrv.URL, "new-"+strconv.Itoa(first), false) },
		func() error { replay++; return call(guardedSrv.URL, "done-"+strconv.Itoa(replay%keys), true) },
		func() error { return call(plainSrv.URL, "k", false) },
		func() error { return call(upstream.URL, "k", false) },
		loneCycle(ctx, store),
	}
	return s.microPair(ctx, id, names, fns)
}

// storeCycle is the proxy workloads' row for a lone durable cycle on the
// proxy's store, timed beside the calls: the first call's target adds it
// to plain forwarding when this run has no cycle-1 figure of its own.
const storeCycle = "store cycle"

// loneCycle returns a call of Do on a new key of store, with the answer a
// proxy saves: one durable claim and completion, nothing forwarded.
func loneCycle(ctx context.Context, store *idem.Store) func() error {
	n := 0
	return func() error {
		n++
		_, _, err := store.Do(ctx, idem.Request{Scope: "cycle", Key: "cycle-" + strconv.Itoa(n), Fingerprint: benchFP},
			func(context.Context) (idem.Result, error) { return idem.Result{Status: 201, Body: benchResult}, nil })
		return err
	}
}

// proxyStore opens the durable store a proxy workload guards its calls
// with, as idem proxy and idem mcp-proxy open theirs (the proxies' error
// policy, stale claims held for the resolver), in a new directory under
// the suite's; done closes it and removes the directory.
func (s *Suite) proxyStore(prefix string) (store *idem.Store, done func(), err error) {
	dir, err := os.MkdirTemp(s.tmp, prefix)
	if err != nil {
		return nil, nil, err
	}
	o := idemOptions(idem.Durable, benchResult)
	o.Policy, o.Resolver = idemproxy.Policy, idemproxy.HoldResolver{}
	if store, err = idem.Open(dir, o); err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return store, func() { store.Close(); os.RemoveAll(dir) }, nil
}
