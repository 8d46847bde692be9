package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemadmin"
	"github.com/idemkit/idem/idemproxy"
)

// idem proxy serves idemproxy in front of a tool server written in any
// language: the store opened as a server opens it (for writing, with a
// background sweep), the proxy on one listener, and idemadmin's page on
// another when asked.

// proxyFlags are idem proxy's flags.
type proxyFlags struct {
	serveFlags
	listen, upstream  string
	methods, paths    string
	pass              string
	requireKey, plain bool
	timeout, wait     time.Duration
	maxBody           int64
	maxResponse       int
}

func newProxyFlags(stderr io.Writer) *proxyFlags {
	f := &proxyFlags{}
	fs := flag.NewFlagSet("idem proxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	f.addServeFlags(fs, "whose keys: header:NAME (set by the authenticating gateway; missing is 401), fixed:NAME or shared (required)")
	fs.StringVar(&f.listen, "listen", "127.0.0.1:8080", "serve the proxy on `host:port`")
	fs.StringVar(&f.upstream, "upstream", "", "the tool server's base `URL` (required)")
	fs.StringVar(&f.methods, "methods", strings.Join(idemproxy.DefaultMethods(), ","), "comma-separated `methods` guarded; others pass through")
	fs.StringVar(&f.paths, "paths", "", "comma-separated path `prefixes` guarded (default every path)")
	fs.StringVar(&f.pass, "pass", "", "comma-separated path `prefixes` always passed through unguarded")
	fs.BoolVar(&f.requireKey, "require-key", false, "refuse a guarded method's request without an Idempotency-Key (default: pass it through)")
	fs.DurationVar(&f.timeout, "timeout", idemproxy.DefaultTimeout, "how long to wait for the upstream's answer once a request is sent; past it the outcome is unknown (held)")
	fs.DurationVar(&f.wait, "wait", 0, "how long a repeat waits for a running first attempt before 409")
	fs.Int64Var(&f.maxBody, "max-body", 0, "the largest request body in `bytes` (default 1 MiB)")
	fs.IntVar(&f.maxResponse, "max-response", 0, "the largest answer kept for replay, in `bytes` (default 1 MiB); larger ones stream and replay as response-not-kept")
	fs.BoolVar(&f.plain, "plain", false, "forward only, with no store (for comparisons); DIR is then not needed")
	setUsage(fs, "DIR -upstream URL -scope SCOPE [-listen HOST:PORT] [-resolver URL] [flags]", `
Puts idem's contract in front of a tool server written in any language: a
reverse proxy that runs each guarded request once per (scope, key) on the
upstream and replays its answer to every repeat, as idemhttp's middleware
does in a Go server (409 while it runs, 422 for a changed payload).

Guarded: a request whose method is in -methods and that carries an
Idempotency-Key (-require-key refuses those without one), on a path in
-paths and not in -pass. Everything else is forwarded as it is.

When the upstream does not answer: not reachable (the request was not sent)
is 502 and the claim is released; sent and then the connection dropped (502)
or no answer within -timeout (504) is an unknown outcome, held: a retry gets
503 outcome-unknown until the -resolver URL answers committed (with the
answer), not committed (the next retry runs) or unknown. Without -resolver,
a held claim waits for an operator (idem resolve, idem admin); it never runs
again on a guess. docs/proxy.md has the protocol and every answer.

DIR is the store: a directory (the embedded store, created if missing), a
redis:// URL, or a postgres:// URL, so that several proxies share keys. Each
request is logged to stderr with its key and the decision. SIGINT or SIGTERM
stops accepting, lets in-flight requests finish for -shutdown-timeout, and
closes the store.`,
		"idem proxy /var/lib/refund-tool/idem -listen 127.0.0.1:8080 -upstream http://127.0.0.1:8000 -scope header:X-Tenant",
		"idem proxy /var/lib/refund-tool/idem -upstream http://127.0.0.1:8000 -scope fixed:refunds -resolver http://127.0.0.1:8001/resolve -admin 127.0.0.1:8765")
	return f
}

func proxyCommand(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	f := newProxyFlags(stderr)
	if err := f.parseServe(args, f.plain); err != nil {
		return err
	}
	opts, err := f.options()
	if err != nil {
		fmt.Fprintf(stderr, "idem proxy: %v\n\n", err)
		f.fs.Usage()
		return errUsage
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	opts.Logger = logger
	var store *idem.Store
	if !f.plain {
		if store, err = f.openProxyStore(ctx, logger); err != nil {
			return err
		}
		defer func() {
			if cerr := store.Close(); err == nil {
				err = cerr
			}
		}()
	}
	p, err := idemproxy.New(store, opts)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM)
	defer stop()
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 2)
	go func() { served <- srv.Serve(ln) }()
	store2 := "no store (plain forwarding)"
	if store != nil {
		store2 = f.dir
	}
	fmt.Fprintf(stdout, "idem proxy: serving http://%s in front of %s (store %s, scope %s)\n", ln.Addr(), f.upstream, store2, f.scope)
	var adminSrv *http.Server
	if f.admin != "" && store != nil {
		if adminSrv, err = serveProxyAdmin(f.admin, store, &f.decisions, stdout, served); err != nil {
			_ = srv.Close()
			return err
		}
	}
	select {
	case err := <-served:
		_ = srv.Close()
		if adminSrv != nil {
			_ = adminSrv.Close()
		}
		return err
	case <-ctx.Done():
	}
	return shutdownProxy(srv, adminSrv, f.shutdown, stdout)
}

// shutdownProxy stops srv: no new connections, in-flight requests finish
// within grace; those still running then are cut off, and their claims,
// whose upstream request is cancelled, are held for recovery (the
// middleware records an unknown outcome, never a guess).
func shutdownProxy(srv, adminSrv *http.Server, grace time.Duration, stdout io.Writer) error {
	fmt.Fprintf(stdout, "idem proxy: stopping; in-flight requests have %s to finish\n", grace)
	shut, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if adminSrv != nil {
		_ = adminSrv.Shutdown(shut)
	}
	if err := srv.Shutdown(shut); err != nil {
		fmt.Fprintf(stdout, "idem proxy: requests still running after %s are cut off and held for recovery\n", grace)
		_ = srv.Close()
	}
	return nil
}

// options turns the flags into idemproxy.Options.
func (f *proxyFlags) options() (*idemproxy.Options, error) {
	if f.upstream == "" {
		return nil, errors.New("-upstream is required: the tool server's base URL")
	}
	u, err := url.Parse(f.upstream)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("-upstream %q: want an http:// or https:// URL", f.upstream)
	}
	o := &idemproxy.Options{Upstream: u, Methods: splitList(f.methods), RequireKey: f.requireKey,
		Paths: splitList(f.paths), Pass: splitList(f.pass), Timeout: f.timeout, MaxBodyBytes: f.maxBody,
		MaxResponseBytes: f.maxResponse, Wait: f.wait, Retention: f.retention}
	if !f.plain {
		if f.scope == "" {
			return nil, errors.New("-scope is required: header:NAME, fixed:NAME or shared (docs/proxy.md)")
		}
		if o.Scope, err = idemproxy.ParseScope(f.scope); err != nil {
			return nil, err
		}
	}
	if kill := f.killer(); kill != nil {
		o.At = func(p idemproxy.Point, _ *http.Request) { kill(p) }
	}
	return o, nil
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// serveProxyAdmin serves idemadmin's handler for store on addr behind a
// new token, as idem admin -write does, and prints how to reach it.
func serveProxyAdmin(addr string, store *idem.Store, decisions *idemadmin.Decisions, stdout io.Writer,
	served chan<- error) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("-admin: %w", err)
	}
	token := newToken()
	port := ln.Addr().(*net.TCPAddr).Port
	h := idemadmin.Handler(store, &idemadmin.HandlerOptions{Authorize: localAuthorizer(true), Decisions: decisions})
	srv := &http.Server{Handler: tokenGate(token, fmt.Sprintf("idem_admin_%d", port), h), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			served <- err
		}
	}()
	base := "http://" + ln.Addr().String() + "/"
	fmt.Fprintf(stdout, "idem proxy: admin page on %s\n", base)
	fmt.Fprintf(stdout, "open: %s?token=%s\n", base, token)
	return srv, nil
}
