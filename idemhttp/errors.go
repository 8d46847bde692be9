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
// is left. It names the key and the attempts.
type RetryError struct {
	// Method and URL are the request's.
	Method, URL string
	// Key is the request's Idempotency-Key (empty for a safe method sent
	// without one).
	Key string
	// Attempts counts the attempts made.
	Attempts int
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
	fmt.Fprintf(&b, "idemhttp: %s %s", e.Method, e.URL)
	if e.Key != "" {
		fmt.Fprintf(&b, " with %s %q", HeaderKey, e.Key)
	}
	fmt.Fprintf(&b, ": gave up after %d attempt", e.Attempts)
	if e.Attempts != 1 {
		b.WriteByte('s')
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
