package idemhttp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
)

// Defaults for zero Options fields.
const (
	DefaultMaxResponseBytes = 1 << 20
	DefaultRetryAfter       = time.Second
	DefaultUnknownStatus    = http.StatusServiceUnavailable
)

// unavailableRetryAfter is the Retry-After sent with 503 unavailable.
const unavailableRetryAfter = time.Second

// Polling bounds while Options.Wait waits for a running first attempt.
const (
	firstPoll = 10 * time.Millisecond
	maxPoll   = 250 * time.Millisecond
)

// Options configure Middleware. Nil Options, and every zero field, mean the
// documented default.
type Options struct {
	// Methods lists the methods that need an Idempotency-Key. Requests with
	// other methods pass through untouched. Default POST and PATCH.
	Methods []string

	// Skip, if set, lets a request through untouched when it returns true:
	// the per-route opt-out for read-only tools. Default none.
	Skip func(*http.Request) bool

	// Scope returns the scope of a request's key: a tenant, principal or
	// tool. The same key in two scopes is two records, so a key sent by one
	// principal never replays another's response. An error answers 401 if
	// it wraps ErrUnauthenticated and 400 otherwise, and the handler does
	// not run; the error's text is not sent (see OnError).
	//
	// Required: Middleware panics without it. PrincipalScope scopes by the
	// verified subject the server's authentication layer put in the
	// context; SharedScope says that the server has one tenant and every
	// caller may replay every other's response. Never scope by a digest of
	// the credentials: a bearer token rotates, and a retry sent after a
	// token refresh would land in a new scope and run the effect again.
	Scope func(*http.Request) (string, error)

	// OnError, if set, is called with the error behind a refusal that the
	// server, not the client, caused: Options.Scope failed or returned a
	// malformed scope, the request body could not be read, or the store
	// could not be read or written (503), or the handler ran and its
	// outcome could not be recorded (500, or 409 ran-twice when another
	// attempt took the key over; the handler's own response is dropped,
	// or, if it was already streaming, sent, and p is then for the log).
	// The problem about to be sent
	// comes with it. Its Detail is generic: error texts from an
	// authentication layer or a storage engine may carry tokens, tenant
	// names, paths or queries, so they never reach the client by default.
	// OnError is where the server logs err with its own logger, and it
	// may redact: a Detail it sets is sent instead (the problem's other
	// fields are kept). It runs on the request's goroutine and must not
	// write to the response. Default none.
	OnError func(r *http.Request, err error, p *Problem)

	// Route names what a request targets, for its fingerprint: a key sent
	// again to another route is a mismatch (422). Default: the URL path
	// and, if any, the query with its parameters sorted. A route pattern
	// such as r.Pattern is only right when the path parameters it leaves
	// out are also in the body: two orders refunded with one key and one
	// body must not share a fingerprint.
	Route func(*http.Request) string

	// MaxBodyBytes bounds the request body, which is read whole to be
	// fingerprinted and handed on. A larger body gets 413 and the handler
	// does not run. Default 1 MiB.
	MaxBodyBytes int64

	// MaxJSONDepth bounds the nesting of JSON bodies when fingerprinting;
	// a deeper body gets 400. Default idem.DefaultMaxDepth (64).
	MaxJSONDepth int

	// MaxResponseBytes bounds the response body kept for replay. A larger
	// response still runs once and streams to the first caller; the store
	// records that it ran (idem.Result.Truncated), and a repeat gets a
	// ProblemResponseNotKept answer with the first run's status, never a
	// second run. Default 1 MiB.
	MaxResponseBytes int

	// SavedHeaders lists the response headers saved and replayed. Default
	// Content-Type, Content-Encoding, Content-Language, Content-Location,
	// Location, Cache-Control, ETag, Last-Modified and Link. Set-Cookie is
	// never saved, even if listed: a replay must not hand one caller's
	// session to another, nor renew a stale one. Nor are the framing
	// headers Content-Length, Transfer-Encoding, Connection and Trailer.
	SavedHeaders []string

	// Wait is how long a request whose key is in progress waits for the
	// first attempt to finish, polling the store, and then replays its
	// response (or runs, if the first attempt was released). Zero answers
	// 409 with Retry-After at once. Default 0.
	Wait time.Duration

	// RetryAfter is the Retry-After sent with 409 in progress: most first
	// attempts finish well before their lease ends, so it is a short hint,
	// capped by the lease end. Default 1 second.
	RetryAfter time.Duration

	// UnknownStatus is the status answered when an earlier attempt's
	// outcome is unknown (ProblemOutcomeUnknown). Default 503, with
	// Retry-After when recovery will ask again: the server cannot answer
	// yet, the request must not run, and a 409 would promise a result that
	// no running attempt will deliver.
	UnknownStatus int

	// Retention overrides the store's retention for the records this
	// middleware writes, when positive.
	Retention time.Duration
}

func defaultSavedHeaders() []string {
	return []string{"Content-Type", "Content-Encoding", "Content-Language", "Content-Location",
		"Location", "Cache-Control", "Etag", "Last-Modified", "Link"}
}

// middleware is the configuration in force; it is never changed after
// Middleware returns, so requests read it without locks.
type middleware struct {
	store       *idem.Store
	methods     map[string]bool
	skip        func(*http.Request) bool
	scope       func(*http.Request) (string, error)
	route       func(*http.Request) string
	maxBody     int64
	fp          idem.Fingerprinter
	maxResponse int
	keep        map[string]bool
	wait        time.Duration
	retryAfter  time.Duration
	unknown     int
	retention   time.Duration
	clock       idem.Clock
	onError     func(*http.Request, error, *Problem)
}

// Middleware returns net/http middleware that runs each keyed request's
// handler once per (scope, key) and replays its response to every repeat.
// It panics if store is nil, opts or its Scope is nil (choose
// PrincipalScope, SharedScope or a function of your own), or opts is
// malformed (a negative size or duration, an empty method, an
// UnknownStatus outside 400 to 599); it never panics per request.
//
// The store's options are in force: its Policy decides whether a response
// is saved, released (5xx by default) or held, a panic is held for its
// Resolver (released without one) and re-raised, its Clock times
// leases and waits, and its Lease is extended while the handler runs.
func Middleware(store *idem.Store, opts *Options) func(http.Handler) http.Handler {
	m := newMiddleware(store, opts)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			m.serve(w, r, next)
		})
	}
}

func newMiddleware(store *idem.Store, opts *Options) *middleware {
	if store == nil {
		panic("idemhttp: Middleware needs a store")
	}
	if opts == nil || opts.Scope == nil {
		panic("idemhttp: Middleware needs Options.Scope: idemhttp.PrincipalScope to scope keys by the " +
			"authenticated caller, or idemhttp.SharedScope for a single-tenant server whose callers may " +
			"replay each other's responses")
	}
	o := *opts
	switch {
	case o.MaxBodyBytes < 0:
		panic("idemhttp: negative MaxBodyBytes")
	case o.MaxResponseBytes < 0:
		panic("idemhttp: negative MaxResponseBytes")
	case o.MaxJSONDepth < 0:
		panic("idemhttp: negative MaxJSONDepth")
	case o.Wait < 0:
		panic("idemhttp: negative Wait")
	case o.RetryAfter < 0:
		panic("idemhttp: negative RetryAfter")
	case o.Retention < 0:
		panic("idemhttp: negative Retention")
	case o.UnknownStatus != 0 && (o.UnknownStatus < 400 || o.UnknownStatus > 599):
		panic(fmt.Sprintf("idemhttp: UnknownStatus %d is not an error status", o.UnknownStatus))
	}
	m := &middleware{
		store: store, skip: o.Skip, scope: o.Scope, route: o.Route,
		maxBody: o.MaxBodyBytes, maxResponse: o.MaxResponseBytes, wait: o.Wait,
		retryAfter: o.RetryAfter, unknown: o.UnknownStatus, retention: o.Retention,
		clock: store.Options().Clock, onError: o.OnError,
	}
	methods := o.Methods
	if len(methods) == 0 {
		methods = []string{http.MethodPost, http.MethodPatch}
	}
	m.methods = make(map[string]bool, len(methods))
	for _, meth := range methods {
		if meth == "" {
			panic("idemhttp: empty method in Methods")
		}
		m.methods[strings.ToUpper(meth)] = true
	}
	if m.route == nil {
		m.route = defaultRoute
	}
	if m.maxBody == 0 {
		m.maxBody = idem.DefaultMaxBodyBytes
	}
	if m.maxResponse == 0 {
		m.maxResponse = DefaultMaxResponseBytes
	}
	if m.retryAfter == 0 {
		m.retryAfter = DefaultRetryAfter
	}
	if m.unknown == 0 {
		m.unknown = DefaultUnknownStatus
	}
	m.fp = idem.Fingerprinter{MaxBytes: int(m.maxBody), MaxDepth: o.MaxJSONDepth}
	saved := o.SavedHeaders
	if saved == nil {
		saved = defaultSavedHeaders()
	}
	m.keep = make(map[string]bool, len(saved))
	for _, h := range saved {
		if ch := http.CanonicalHeaderKey(h); !dropped(ch) {
			m.keep[ch] = true
		}
	}
	return m
}

// defaultRoute is the path, and the query in a canonical order.
func defaultRoute(r *http.Request) string {
	if r.URL.RawQuery == "" {
		return r.URL.Path
	}
	return r.URL.Path + "?" + r.URL.Query().Encode()
}

func (m *middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if !m.methods[r.Method] || (m.skip != nil && m.skip(r)) {
		next.ServeHTTP(w, r)
		return
	}
	values := r.Header.Values(HeaderKey)
	if len(values) == 0 {
		writeProblem(w, Problem{Type: ProblemMissingKey, Title: "Idempotency-Key missing", Status: http.StatusBadRequest,
			Detail: fmt.Sprintf("%s %s needs an %s header: derive one key per intended effect and send it on every retry",
				r.Method, r.URL.Path, HeaderKey)}, 0)
		return
	}
	key, err := parseKey(values)
	if err != nil {
		writeProblem(w, Problem{Type: ProblemInvalidKey, Title: "Idempotency-Key invalid", Status: http.StatusBadRequest,
			Detail: strings.TrimPrefix(err.Error(), "idem: ") +
				fmt.Sprintf("; a key is 1 to %d printable ASCII characters", backend.MaxKeyLen)}, 0)
		return
	}
	scope, err := m.scope(r)
	if err == nil {
		err = backend.ValidateScope(scope)
	}
	if err != nil {
		p := Problem{Type: ProblemInvalidScope, Title: "Idempotency scope not determined", Status: http.StatusBadRequest,
			Key: key, Detail: fmt.Sprintf("key %q: the server could not determine whose key it is", key)}
		if errors.Is(err, ErrUnauthenticated) {
			p.Status = http.StatusUnauthorized
			p.Detail = fmt.Sprintf("key %q: the request is not authenticated, and a key belongs to its caller", key)
		}
		m.fail(w, r, err, p, 0)
		return
	}

	body, ok := m.readBody(w, r, key)
	if !ok {
		return
	}
	route, ct := m.route(r), r.Header.Get("Content-Type")
	fp, err := m.fp.Sum(r.Method, route, ct, body)
	var prev string
	if err == nil {
		// A record stored before idemfp2 still matches (idem.Request).
		prev, err = m.fp.SumPrevious(r.Method, route, ct, body)
	}
	if err != nil {
		if errors.Is(err, idem.ErrBodyTooLarge) {
			m.tooLarge(w, key)
			return
		}
		writeProblem(w, Problem{Type: ProblemInvalidBody, Title: "Request body not accepted", Status: http.StatusBadRequest,
			Key: key, Detail: fmt.Sprintf("key %q: %s", key, m.bodyTrouble(err))}, 0)
		return
	}
	// The handler gets the body it would have had, read from memory.
	r2 := r.Clone(r.Context())
	r2.Body = io.NopCloser(bytes.NewReader(body))
	r2.ContentLength = int64(len(body))
	r2.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }

	m.run(w, r2, next, idem.Request{Scope: scope, Key: key, Fingerprint: fp, PreviousFingerprint: prev,
		Retention: m.retention})
}

// readBody reads the whole body, bounded by MaxBodyBytes. It answers the
// request itself and returns false when it cannot.
func (m *middleware) readBody(w http.ResponseWriter, r *http.Request, key string) ([]byte, bool) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, true
	}
	if r.ContentLength > m.maxBody {
		m.tooLarge(w, key)
		return nil, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, m.maxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			m.tooLarge(w, key)
			return nil, false
		}
		m.fail(w, r, err, Problem{Type: ProblemInvalidBody, Title: "Request body not accepted", Status: http.StatusBadRequest,
			Key: key, Detail: fmt.Sprintf("key %q: the request body could not be read", key)}, 0)
		return nil, false
	}
	return body, true
}

// bodyTrouble says why a body could not be fingerprinted without quoting
// it: the core's errors may carry pieces of the body, such as a member name.
func (m *middleware) bodyTrouble(err error) string {
	switch {
	case errors.Is(err, idem.ErrDuplicateMember):
		return "a JSON object in the body names a member twice"
	case errors.Is(err, idem.ErrBodyTooDeep):
		depth := m.fp.MaxDepth
		if depth <= 0 {
			depth = idem.DefaultMaxDepth
		}
		return fmt.Sprintf("the JSON body nests deeper than %d levels", depth)
	case errors.Is(err, idem.ErrInvalidJSON):
		return "the body is not valid JSON"
	default:
		return "the body could not be fingerprinted"
	}
}

func (m *middleware) tooLarge(w http.ResponseWriter, key string) {
	writeProblem(w, Problem{Type: ProblemBodyTooLarge, Title: "Request body too large", Status: http.StatusRequestEntityTooLarge,
		Key: key, Detail: fmt.Sprintf("key %q: the request body is over the %d bytes accepted", key, m.maxBody)}, 0)
}

// run claims the key and runs the handler, or replays, waits or refuses.
func (m *middleware) run(w http.ResponseWriter, r *http.Request, next http.Handler, req idem.Request) {
	ctx := r.Context()
	var deadline time.Time
	if m.wait > 0 {
		deadline = m.clock.Now().Add(m.wait)
	}
	poll := firstPoll
	for {
		var rec *recorder
		res, replayed, err := m.store.Do(ctx, req, func(ctx context.Context) (idem.Result, error) {
			// Do extends the lease while this runs and cancels ctx if the
			// claim is lost; a panic holds the claim for the store's
			// Resolver (releases it without one) and is re-raised.
			rec = newRecorder(w, m.maxResponse)
			next.ServeHTTP(rec, r.WithContext(ctx))
			return rec.result(m.keep), nil
		})
		if rec != nil {
			// The handler ran. Do saved, released or held its result as the
			// store's policy said, before anything buffered goes out.
			m.ran(w, r, req.Key, rec, err)
			return
		}
		var saved *idem.SavedError
		if err == nil && replayed || errors.As(err, &saved) {
			m.replay(w, req.Key, res)
			return
		}
		var inProgress *idem.InProgressError
		if errors.As(err, &inProgress) && m.wait > 0 && ctx.Err() == nil {
			if now := m.clock.Now(); now.Before(deadline) {
				select {
				case <-ctx.Done():
				case <-m.clock.After(min(poll, deadline.Sub(now))):
				}
				poll = min(2*poll, maxPoll)
				continue
			}
		}
		m.refuse(w, r, req.Key, err)
		return
	}
}

// ran answers a request whose handler ran, once Do returned err. The
// handler's response goes out only when its outcome was recorded (saved,
// recorded late after its claim was recovered, or released or held as the
// policy said): a client never holds an answer the key's record
// contradicts. When it was not recorded (ErrOutcomeNotRecorded: storage
// failed, or the claim was recovered and the key claimed again, ErrRanTwice)
// the handler's status, headers and body are dropped and a problem says
// what a retry with the key will find; OnError hears of err. A response
// already streaming cannot be taken back: OnError still hears of it.
func (m *middleware) ran(w http.ResponseWriter, r *http.Request, key string, rec *recorder, err error) {
	if !errors.Is(err, idem.ErrOutcomeNotRecorded) {
		rec.commit()
		return
	}
	p, retryAfter := notRecorded(key), time.Duration(0)
	if errors.Is(err, idem.ErrRanTwice) {
		p, retryAfter = ranTwice(key), time.Second
	}
	if rec.streaming || rec.uncaptured {
		if m.onError != nil {
			m.onError(r, err, &p)
		}
		return
	}
	rec.discard()
	m.fail(w, r, err, p, retryAfter)
}

// ranTwice is the problem for an effect whose claim was recovered and
// taken over by another attempt before its outcome was recorded.
func ranTwice(key string) Problem {
	return Problem{Type: ProblemRanTwice, Title: "Outcome superseded by another attempt",
		Status: http.StatusConflict, Key: key,
		Detail: fmt.Sprintf("the request with key %q ran, but it stalled past its lease and another attempt with the "+
			"key took over; that attempt's outcome is the recorded one: retry with the same key to get it", key)}
}

// replay answers with a saved result, marked as replayed.
func (m *middleware) replay(w http.ResponseWriter, key string, res idem.Result) {
	h := w.Header()
	h.Set(HeaderReplayed, "true")
	status := res.Status
	switch {
	case res.Truncated && status == 0:
		// The handler hijacked the connection or wrote around the
		// recorder: no one knows what the first caller got, so no status
		// of its is claimed.
		writeProblem(w, Problem{Type: ProblemResponseNotKept, Title: "Request ran; response not kept",
			Status: http.StatusInternalServerError, Key: key,
			Detail: fmt.Sprintf("the request with key %q ran once, but its handler took over the connection or wrote "+
				"around the idempotency middleware, so its response was not captured; it will not run again for "+
				"this key", key)}, 0)
		return
	case res.Truncated:
		writeProblem(w, Problem{Type: ProblemResponseNotKept, Title: "Request ran; response not kept", Status: status, Key: key,
			Detail: fmt.Sprintf("the request with key %q ran once and answered %d, but its response was larger than the "+
				"%d bytes kept for replay; it will not run again for this key", key, status, m.maxResponse)}, 0)
		return
	case status == 0 && res.Error != "":
		writeProblem(w, Problem{Type: ProblemSavedError, Title: "Request ran and failed", Status: http.StatusInternalServerError,
			Key: key, Detail: fmt.Sprintf("the request with key %q ran once and failed; its saved error is replayed", key)}, 0)
		return
	case status == 0:
		status = http.StatusOK
	}
	for k, v := range res.Header {
		ck := http.CanonicalHeaderKey(k)
		if dropped(ck) {
			continue
		}
		h[ck] = append([]string(nil), v...)
	}
	w.WriteHeader(status)
	_, _ = w.Write(res.Body)
}

// dropped reports whether a canonical header name is never saved nor
// replayed, whatever SavedHeaders lists.
func dropped(header string) bool {
	switch header {
	case "Set-Cookie", "Content-Length", "Transfer-Encoding", "Connection", "Trailer":
		return true
	}
	return false
}

// refuse answers a request that must not run now.
func (m *middleware) refuse(w http.ResponseWriter, r *http.Request, key string, err error) {
	var (
		inProgress *idem.InProgressError
		mismatch   *idem.MismatchError
		unknown    *idem.OutcomeUnknownError
	)
	switch {
	case errors.As(err, &inProgress):
		ra := min(m.retryAfter, inProgress.RetryAfter(m.clock.Now()))
		writeProblem(w, Problem{Type: ProblemInProgress, Title: "Request in progress", Status: http.StatusConflict, Key: key,
			Detail: fmt.Sprintf("a request with key %q is still running; retry with the same key to get its response", key)}, ra)
	case errors.As(err, &mismatch):
		writeProblem(w, Problem{Type: ProblemMismatch, Title: "Idempotency-Key reused with a different request",
			Status: http.StatusUnprocessableEntity, Key: key,
			Detail: fmt.Sprintf("key %q was first used with a different method, route, media type (Content-Type, "+
				"with the parameters that change the body's meaning) or body; it names that one "+
				"intended effect and was not run again: send the original request, or a new key for a new effect", key)}, 0)
	case errors.As(err, &unknown):
		var ra time.Duration
		detail := fmt.Sprintf("an earlier attempt with key %q stopped before its outcome was recorded, and it is not yet "+
			"known whether it took effect; it will not run again until recovery decides", key)
		switch {
		case unknown.Attention:
			detail = fmt.Sprintf("an earlier attempt with key %q stopped before its outcome was recorded, and recovery "+
				"could not tell whether it took effect: an operator must decide; it will not run again", key)
		case !unknown.NextCheck.IsZero():
			ra = max(unknown.NextCheck.Sub(m.clock.Now()), time.Second)
		}
		writeProblem(w, Problem{Type: ProblemOutcomeUnknown, Title: "Outcome of an earlier attempt unknown",
			Status: m.unknown, Key: key, Detail: detail}, ra)
	case errors.Is(err, idem.ErrOutcomeNotRecorded):
		// The effect ran: never "unavailable, retry safely" (503).
		m.fail(w, r, err, notRecorded(key), 0)
	case errors.Is(err, idem.ErrInvalidKey):
		// The middleware checked the key and the scope before: the store's
		// rule may name the scope, which the client did not send.
		m.fail(w, r, err, Problem{Type: ProblemInvalidKey, Title: "Idempotency-Key invalid", Status: http.StatusBadRequest,
			Key: key, Detail: fmt.Sprintf("key %q or its scope was refused by the store", key)}, 0)
	default:
		// ErrUnavailable, ErrClosed, ErrCorrupt, a cancelled request: the
		// handler did not run, and the key is as it was.
		m.fail(w, r, err, Problem{Type: ProblemUnavailable, Title: "Idempotency store unavailable",
			Status: http.StatusServiceUnavailable, Key: key,
			Detail: fmt.Sprintf("the request with key %q was not run: its idempotency record could not be read or "+
				"written; retry with the same key", key)}, unavailableRetryAfter)
	}
}

// notRecorded is the problem for an effect whose outcome was not recorded.
func notRecorded(key string) Problem {
	return Problem{Type: ProblemOutcomeNotRecorded, Title: "Outcome not recorded",
		Status: http.StatusInternalServerError, Key: key,
		Detail: fmt.Sprintf("the request with key %q ran, but its outcome could not be recorded; it may have taken "+
			"effect, and it will not run again until recovery decides: do not retry it with a new key", key)}
}

// fail answers with p, a refusal the server caused with err. err's text is
// not in p: OnError may log it and choose a redacted Detail.
func (m *middleware) fail(w http.ResponseWriter, r *http.Request, err error, p Problem, retryAfter time.Duration) {
	if m.onError != nil {
		q := p
		m.onError(r, err, &q)
		p.Detail = q.Detail
	}
	writeProblem(w, p, retryAfter)
}
