package idemhttp

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"mime"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
)

// Defaults for zero Transport fields.
const (
	DefaultMaxAttempts = 5
	DefaultMaxElapsed  = time.Minute
	DefaultBaseDelay   = 100 * time.Millisecond
	DefaultMaxDelay    = 10 * time.Second
)

// maxProblemBytes bounds how much of a retried response is read for its
// problem details; the rest is discarded.
const maxProblemBytes = 64 << 10

// maxRetryAfter bounds a parsed Retry-After, so that a huge number cannot
// overflow a Duration; any wait that long is past every deadline anyway.
const maxRetryAfter = 1_000_000 * time.Second

// Transport is an http.RoundTripper for the agent side that retries a
// request safely: a request with an Idempotency-Key, or with a safe method
// (GET, HEAD, OPTIONS, TRACE), is retried on connection errors, timeouts
// and the statuses in RetryStatuses, with the same key and the same body,
// after an exponential backoff with full jitter or the server's
// Retry-After. A request with any other method and no key goes to Base
// once, untouched: retrying it could repeat its effect.
//
// When it gives up, Transport returns a *RetryError naming the key and the
// attempts. Its zero value is ready to use; it is safe for concurrent use
// as long as its fields are not changed.
type Transport struct {
	// Base makes each attempt. Default http.DefaultTransport.
	Base http.RoundTripper

	// MaxAttempts bounds the attempts of one request, the first included.
	// Default 5; 1 turns retries off. An attempt is one call to Base: Go's
	// http.Transport may itself send a keyed request again on a new
	// connection when a reused one fails before any response, so more
	// requests than attempts can reach the server (RetryError.Sent
	// counts them).
	MaxAttempts int

	// MaxElapsed bounds the time from the first attempt: no wait or retry
	// starts past it, and the attempt running when it passes is cancelled
	// (its response body included, as http.Client.Timeout does). Default
	// 1 minute.
	MaxElapsed time.Duration

	// AttemptTimeout bounds one attempt, reading its response body
	// included; an attempt that times out is retried. Default none (only
	// MaxElapsed and the request's context bound an attempt).
	AttemptTimeout time.Duration

	// BaseDelay and MaxDelay shape the backoff: the wait before retry n is
	// drawn uniformly from [0, min(MaxDelay, BaseDelay·2ⁿ⁻¹)] (full
	// jitter). A Retry-After header replaces it. Defaults 100 ms and 10 s.
	BaseDelay, MaxDelay time.Duration

	// RetryStatuses lists the response statuses that are retried. Default
	// 409 (in progress), 429, 502, 503 and 504.
	RetryStatuses []int

	// Clock times the waits between attempts and MaxElapsed. Default the
	// wall clock. (AttemptTimeout and cancelling the attempt in flight at
	// the deadline use context timers, on the wall clock.)
	Clock idem.Clock

	// Jitter returns a random duration in [0, max]. Default uniform.
	Jitter func(max time.Duration) time.Duration
}

var _ http.RoundTripper = (*Transport)(nil)

// NewClient returns an http.Client whose transport is t (a zero Transport
// if t is nil).
func NewClient(t *Transport) *http.Client {
	if t == nil {
		t = &Transport{}
	}
	return &http.Client{Transport: t}
}

func (t *Transport) base() http.RoundTripper {
	if t.Base != nil {
		return t.Base
	}
	return http.DefaultTransport
}

func (t *Transport) clock() idem.Clock {
	if t.Clock != nil {
		return t.Clock
	}
	return idem.SystemClock()
}

func (t *Transport) retryStatus(code int) bool {
	if t.RetryStatuses == nil {
		switch code {
		case http.StatusConflict, http.StatusTooManyRequests, http.StatusBadGateway,
			http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return true
		}
		return false
	}
	return slices.Contains(t.RetryStatuses, code)
}

// backoff returns the wait before retry n (n ≥ 1): full jitter over an
// exponentially growing cap.
func (t *Transport) backoff(n int) time.Duration {
	base, maxDelay := t.BaseDelay, t.MaxDelay
	if base <= 0 {
		base = DefaultBaseDelay
	}
	if maxDelay <= 0 {
		maxDelay = DefaultMaxDelay
	}
	ceiling := base
	for i := 1; i < n && ceiling < maxDelay; i++ {
		ceiling *= 2
	}
	ceiling = min(ceiling, maxDelay)
	if t.Jitter != nil {
		return min(max(t.Jitter(ceiling), 0), ceiling)
	}
	return rand.N(ceiling + 1)
}

// safeMethod reports whether a request of this method may be retried
// without a key.
func safeMethod(m string) bool {
	switch m {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	key := req.Header.Get(HeaderKey)
	if key == "" && !safeMethod(req.Method) {
		return t.base().RoundTrip(req)
	}
	maxAttempts := t.MaxAttempts
	if maxAttempts <= 0 {
		maxAttempts = DefaultMaxAttempts
	}
	maxElapsed := t.MaxElapsed
	if maxElapsed <= 0 {
		maxElapsed = DefaultMaxElapsed
	}
	clock := t.clock()
	deadline := clock.Now().Add(maxElapsed)
	giveUp := &RetryError{Method: req.Method, URL: req.URL.Redacted(), Key: key}
	// Count the requests that reach a connection, the base transport's own
	// re-sends included; the hooks already in the context still run.
	var sent atomic.Int32
	traced := httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			if info.Err == nil {
				sent.Add(1)
			}
		},
	})
	stop := func(reason string) (*http.Response, error) {
		giveUp.Reason, giveUp.Sent = reason, int(sent.Load())
		return nil, giveUp
	}

	// Every attempt sends the same body: from GetBody when the request has
	// one (http.NewRequest sets it for in-memory bodies), else buffered.
	first, getBody := req.Body, req.GetBody
	if first != nil && first != http.NoBody && getBody == nil {
		b, err := io.ReadAll(first)
		_ = first.Close()
		if err != nil {
			giveUp.Err = err
			return stop("fatal")
		}
		getBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
		first, _ = getBody()
	}

	for attempt := 1; ; attempt++ {
		giveUp.Attempts = attempt
		body := first
		if attempt > 1 && getBody != nil {
			var err error
			if body, err = getBody(); err != nil {
				giveUp.Err = err
				return stop("fatal")
			}
		}
		limit := deadline.Sub(clock.Now())
		if t.AttemptTimeout > 0 {
			limit = min(limit, t.AttemptTimeout)
		}
		ctx, cancel := context.WithTimeout(traced, max(limit, 0))
		r := req.Clone(ctx)
		r.Body = body
		resp, err := t.base().RoundTrip(r)

		var wait time.Duration
		waitSet := false
		if err != nil {
			cancel()
			giveUp.Err, giveUp.Status, giveUp.Problem = err, 0, nil
			switch {
			case req.Context().Err() != nil:
				return stop("canceled")
			case !retryableError(err):
				return stop("fatal")
			}
		} else {
			if !t.retryStatus(resp.StatusCode) {
				resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: cancel}
				return resp, nil
			}
			giveUp.Err, giveUp.Status = nil, resp.StatusCode
			giveUp.Problem = readProblem(resp)
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxProblemBytes))
			_ = resp.Body.Close()
			cancel()
			wait, waitSet = parseRetryAfter(resp.Header.Get("Retry-After"), clock.Now())
			if !waitSet && giveUp.Problem != nil && giveUp.Problem.Type == ProblemOutcomeUnknown {
				// The server says an earlier attempt's outcome needs an
				// operator: no retry can change that.
				return stop("fatal")
			}
		}
		if attempt >= maxAttempts {
			return stop("attempts")
		}
		if !waitSet {
			wait = t.backoff(attempt)
		}
		if !clock.Now().Add(wait).Before(deadline) {
			return stop("deadline")
		}
		select {
		case <-req.Context().Done():
			if giveUp.Err == nil {
				giveUp.Err = req.Context().Err()
			}
			return stop("canceled")
		case <-clock.After(wait):
		}
	}
}

// retryableError reports whether an attempt that failed with err may be
// retried: connection errors and timeouts may, a certificate the client
// refuses may not.
func retryableError(err error) bool {
	var cert *tls.CertificateVerificationError
	return !errors.As(err, &cert)
}

// parseRetryAfter reads a Retry-After value: delay seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s < 0 {
			return 0, false
		}
		if s > int64(maxRetryAfter/time.Second) {
			return maxRetryAfter, true
		}
		return time.Duration(s) * time.Second, true
	}
	if at, err := http.ParseTime(v); err == nil {
		return min(max(at.Sub(now), 0), maxRetryAfter), true
	}
	return 0, false
}

// readProblem reads a problem+json body, if the response has one.
func readProblem(resp *http.Response) *Problem {
	mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err != nil || mt != ProblemContentType {
		return nil
	}
	var p Problem
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxProblemBytes)).Decode(&p); err != nil || p.Type == "" {
		return nil
	}
	return &p
}

// cancelBody releases an attempt's context when its body is closed.
type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}
