package idemproxy

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
)

// Defaults for zero Options fields.
const (
	// DefaultTimeout bounds the wait for the upstream's response headers
	// once the request was sent.
	DefaultTimeout = 60 * time.Second
)

// DefaultMethods are the methods guarded when Options.Methods is empty.
func DefaultMethods() []string {
	return []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}
}

// Point names a moment in a guarded request's life, for Options.At.
type Point string

// The points Options.At hears of.
const (
	// PointClaimed: the key is claimed and the request is about to go to
	// the upstream.
	PointClaimed Point = "claimed"
	// PointUpstreamAnswered: the upstream answered (acted) and the answer
	// is read, not yet recorded nor sent to the client.
	PointUpstreamAnswered Point = "upstream-answered"
	// PointAnswered: the client was answered (the record written first).
	PointAnswered Point = "answered"
)

// Options configure a Proxy. Upstream is required; with a store, so is
// Scope. Every zero field means the documented default.
type Options struct {
	// Upstream is the server requests go to: scheme, host and an optional
	// base path that request paths are joined to.
	Upstream *url.URL

	// Scope returns the scope of a guarded request's key (ParseScope).
	// Required with a store.
	Scope func(*http.Request) (string, error)

	// Methods lists the methods guarded. Default DefaultMethods (POST,
	// PUT, PATCH, DELETE); others pass through.
	Methods []string

	// RequireKey refuses (400 missing-key) a guarded method's request that
	// carries no Idempotency-Key. Default false: such a request passes
	// through unguarded, as the upstream would have had it.
	RequireKey bool

	// Paths, if set, limits guarding to requests whose path starts with one
	// of these prefixes. Default every path.
	Paths []string

	// Pass lists path prefixes that always pass through unguarded (read-only
	// routes that use a guarded method). Default none.
	Pass []string

	// Transport sends requests to the upstream. Default a clone of
	// http.DefaultTransport with ResponseHeaderTimeout set to Timeout.
	Transport http.RoundTripper

	// Timeout bounds the wait for the upstream's response headers once the
	// request was sent; past it, a guarded request's outcome is unknown
	// (504, held). It applies to the default Transport only. Default
	// DefaultTimeout.
	Timeout time.Duration

	// MaxBodyBytes and MaxResponseBytes are the middleware's
	// (idemhttp.Options): the request body read whole and fingerprinted,
	// and the answer kept for replay. Defaults 1 MiB each.
	MaxBodyBytes     int64
	MaxResponseBytes int

	// Wait is idemhttp.Options.Wait: how long a repeat waits for a running
	// first attempt before 409. Default 0.
	Wait time.Duration

	// Retention overrides the store's retention for the records the proxy
	// writes, when positive.
	Retention time.Duration

	// Logger, if set, gets one line per request: its method, path, key,
	// status and what the proxy decided. Default none.
	Logger *slog.Logger

	// At, if set, is called at each Point of a guarded request's life, on
	// the request's goroutine: a seam for tests that kill the proxy at a
	// chosen moment. Default none.
	At func(Point, *http.Request)
}

// Proxy is an http.Handler that forwards requests to an upstream, with
// idemhttp's contract in front of the guarded ones (see the package doc).
type Proxy struct {
	upstream    *url.URL
	transport   http.RoundTripper
	timeout     time.Duration
	maxResponse int
	logger      *slog.Logger
	atPoint     func(Point, *http.Request)
	// handler is the middleware around forward, or forward alone without
	// a store; set once in New.
	handler http.Handler
}

var _ http.Handler = (*Proxy)(nil)

// New returns a Proxy in front of opts.Upstream. With a nil store it only
// forwards (plain forwarding: the same proxy without the contract, for
// comparisons). A store must be opened with Policy as its
// idem.Options.Policy and with a Resolver (HTTPResolver, or HoldResolver
// to hold every stale claim for an operator): the proxy relies on both to
// hold unknown outcomes. New returns an error wrapping ErrInvalidOptions
// for a bad configuration.
func New(store *idem.Store, opts *Options) (*Proxy, error) {
	if opts == nil || opts.Upstream == nil || opts.Upstream.Host == "" ||
		(opts.Upstream.Scheme != "http" && opts.Upstream.Scheme != "https") {
		return nil, fmt.Errorf("%w: Upstream must be an http:// or https:// URL with a host", ErrInvalidOptions)
	}
	o := *opts
	if store != nil && o.Scope == nil {
		return nil, fmt.Errorf("%w: a store needs Scope (ParseScope: header:NAME, fixed:NAME or shared)", ErrInvalidOptions)
	}
	if store != nil && store.Options().Resolver == nil {
		return nil, fmt.Errorf("%w: the store needs a Resolver (HTTPResolver or HoldResolver)", ErrInvalidOptions)
	}
	if o.Timeout < 0 || o.MaxBodyBytes < 0 || o.MaxResponseBytes < 0 || o.Wait < 0 || o.Retention < 0 {
		return nil, fmt.Errorf("%w: a negative size or duration", ErrInvalidOptions)
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MaxResponseBytes == 0 {
		o.MaxResponseBytes = idemhttp.DefaultMaxResponseBytes
	}
	p := &Proxy{upstream: o.Upstream, transport: o.Transport, timeout: o.Timeout,
		maxResponse: o.MaxResponseBytes, logger: o.Logger, atPoint: o.At}
	if p.transport == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.ResponseHeaderTimeout = o.Timeout
		t.MaxIdleConnsPerHost = 64
		p.transport = t
	}
	p.handler = http.HandlerFunc(p.forward)
	if store == nil {
		return p, nil
	}
	methods := o.Methods
	if len(methods) == 0 {
		methods = DefaultMethods()
	}
	for i, m := range methods {
		if m == "" {
			return nil, fmt.Errorf("%w: an empty method", ErrInvalidOptions)
		}
		methods[i] = strings.ToUpper(m)
	}
	mw := idemhttp.Middleware(store, &idemhttp.Options{
		Methods: methods,
		Skip: func(r *http.Request) bool {
			return (!o.RequireKey && len(r.Header.Values(idemhttp.HeaderKey)) == 0) ||
				!hasPrefix(r.URL.Path, o.Paths, true) || hasPrefix(r.URL.Path, o.Pass, false)
		},
		Scope:            o.Scope,
		OnError:          func(r *http.Request, err error, _ *idemhttp.Problem) { p.logf(r, "refused: %v", err) },
		MaxBodyBytes:     o.MaxBodyBytes,
		MaxResponseBytes: o.MaxResponseBytes,
		SavedHeaders:     savedHeaders(),
		Wait:             o.Wait,
		Retention:        o.Retention,
	})
	p.handler = mw(p.handler)
	return p, nil
}

// savedHeaders are the middleware's defaults and HeaderOutcome, which
// Policy reads from the recorded result.
func savedHeaders() []string {
	return []string{"Content-Type", "Content-Encoding", "Content-Language", "Content-Location",
		"Location", "Cache-Control", "Etag", "Last-Modified", "Link", HeaderOutcome}
}

// hasPrefix reports whether path starts with one of prefixes; empty is
// whether no prefixes are given.
func hasPrefix(path string, prefixes []string, empty bool) bool {
	if len(prefixes) == 0 {
		return empty
	}
	return slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(path, p) })
}

// ServeHTTP answers r: guarded requests through the middleware, the others
// forwarded as they are. It logs one line per request when Options.Logger
// is set.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := &note{}
	r = r.WithContext(context.WithValue(r.Context(), noteKey{}, n))
	sw := &statusWriter{ResponseWriter: w}
	start := time.Now()
	p.handler.ServeHTTP(sw, r)
	if n.ran && p.atPoint != nil {
		// The answer leaves before the hook hears of it.
		_ = http.NewResponseController(w).Flush()
		p.at(PointAnswered, r)
	}
	if p.logger != nil {
		p.logger.LogAttrs(r.Context(), slog.LevelInfo, "idem proxy",
			slog.String("method", r.Method), slog.String("path", r.URL.Path),
			slog.String("key", r.Header.Get(idemhttp.HeaderKey)), slog.Int("status", sw.status),
			slog.String("decision", n.decision(sw)), slog.Duration("took", time.Since(start)))
	}
}

// at calls Options.At.
func (p *Proxy) at(pt Point, r *http.Request) {
	if p.atPoint != nil {
		p.atPoint(pt, r)
	}
}

// logf logs a detail of a request's handling at Warn.
func (p *Proxy) logf(r *http.Request, format string, args ...any) {
	if p.logger != nil {
		p.logger.LogAttrs(r.Context(), slog.LevelWarn, "idem proxy: "+fmt.Sprintf(format, args...),
			slog.String("method", r.Method), slog.String("path", r.URL.Path),
			slog.String("key", r.Header.Get(idemhttp.HeaderKey)))
	}
}

// noteKey is the context key of a request's note.
type noteKey struct{}

// note is what the handling of one request learned, for its log line. It
// is written and read on the request's goroutine only.
type note struct {
	ran      bool   // the key was claimed and the request forwarded
	upstream string // "answered", "streaming", OutcomeNotSent, OutcomeUnknown; "" when not forwarded
}

// noteOf returns r's note (a throwaway one outside ServeHTTP).
func noteOf(r *http.Request) *note {
	if n, ok := r.Context().Value(noteKey{}).(*note); ok {
		return n
	}
	return &note{}
}

// decision names what the proxy did with a request, for the log.
func (n *note) decision(sw *statusWriter) string {
	switch {
	case n.ran && n.upstream == OutcomeUnknown:
		return "ran: outcome unknown, held"
	case n.ran && n.upstream == OutcomeNotSent:
		return "claimed: upstream unreachable, released"
	case n.ran:
		return "ran: recorded"
	case sw.Header().Get(idemhttp.HeaderReplayed) == "true":
		return "replayed"
	case n.upstream != "":
		return "passed through"
	}
	return "refused"
}

// statusWriter remembers the status written, for the log line, and keeps
// Flush working through http.ResponseController (Unwrap).
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap returns the writer underneath, for http.ResponseController.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
