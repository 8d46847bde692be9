package idemhttp

import (
	"errors"
	"fmt"
	"strings"
)

// ErrUnauthenticated is wrapped by an Options.Scope error when the request
// carries no principal to scope its key by; the middleware answers 401.
var ErrUnauthenticated = errors.New("idemhttp: request not authenticated")

// RetryError is returned by Transport when it gives up on a keyed request:
// every attempt failed or got a retryable status, and no attempt or time
// is left. It names the key and the attempts. Its text leaves out the
// method and URL, which the *url.Error that http.Client wraps it in
// already prints; they are in its fields.
type RetryError struct {
	// Method and URL are the request's (the URL without its password).
	Method, URL string
	// Key is the request's Idempotency-Key (empty for a safe method sent
	// without one).
	Key string
	// Attempts counts the attempts Transport made, each a call to its Base;
	// Transport.MaxAttempts bounds it.
	Attempts int
	// Sent counts the requests written in full to a connection, as
	// net/http's client trace (httptrace.ClientTrace.WroteRequest) reports
	// them. It can exceed Attempts: Go's http.Transport itself sends a
	// request that carries an Idempotency-Key again, on a new connection,
	// when a reused keep-alive connection fails before any response (the
	// server may have read the first copy). It is 0 when Base reports no
	// trace events, as a RoundTripper that is not net/http's may not.
	Sent int
	// Status is the last attempt's response status, 0 if it got none.
	Status int
	// Problem is the last response's problem details, if it had any.
	Problem *Problem
	// Err is the last attempt's error, nil if it got a response.
	Err error
	// Reason says why retrying stopped: "attempts", "deadline" or "canceled".
	Reason string
}

func (e *RetryError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "idemhttp: gave up after %d attempt", e.Attempts)
	if e.Attempts != 1 {
		b.WriteByte('s')
	}
	if e.Sent > e.Attempts {
		fmt.Fprintf(&b, " (%d requests sent)", e.Sent)
	}
	if e.Key != "" {
		fmt.Fprintf(&b, " with %s %q", HeaderKey, e.Key)
	}
	switch e.Reason {
	case "deadline":
		b.WriteString(" (deadline)")
	case "canceled":
		b.WriteString(" (canceled)")
	}
	switch {
	case e.Err != nil:
		fmt.Fprintf(&b, ": %v", e.Err)
	case e.Problem != nil:
		fmt.Fprintf(&b, ": last status %d (%s)", e.Status, e.Problem.Type)
	case e.Status != 0:
		fmt.Fprintf(&b, ": last status %d", e.Status)
	}
	return b.String()
}

// Unwrap returns the last attempt's error.
func (e *RetryError) Unwrap() error { return e.Err }
