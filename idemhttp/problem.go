package idemhttp

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Problem type URIs. Each names one way a request can be refused or answered
// without running the handler; they are stable, so clients can switch on them.
const (
	// ProblemMissingKey: a method that needs a key came without an
	// Idempotency-Key header. Status 400.
	ProblemMissingKey = "https://idemkit.dev/problems/missing-key"
	// ProblemInvalidKey: the key is empty, longer than backend.MaxKeyLen, not
	// printable ASCII, a malformed quoted string, or sent more than once.
	// Status 400.
	ProblemInvalidKey = "https://idemkit.dev/problems/invalid-key"
	// ProblemInvalidScope: Options.Scope failed or returned a malformed
	// scope. Status 400, or 401 when the error wraps ErrUnauthenticated.
	ProblemInvalidScope = "https://idemkit.dev/problems/invalid-scope"
	// ProblemBodyTooLarge: the request body is over Options.MaxBodyBytes.
	// Status 413.
	ProblemBodyTooLarge = "https://idemkit.dev/problems/body-too-large"
	// ProblemInvalidBody: the body could not be read or fingerprinted (for
	// example JSON with a duplicate member name). Status 400.
	ProblemInvalidBody = "https://idemkit.dev/problems/invalid-body"
	// ProblemInProgress: an earlier request with the key is still running.
	// Status 409, with Retry-After.
	ProblemInProgress = "https://idemkit.dev/problems/in-progress"
	// ProblemMismatch: the key was first used with a different request:
	// another method, route, media type (Content-Type, with the parameters
	// that change what the body means: a multipart boundary, a non-UTF-8
	// charset) or body. Status 422.
	ProblemMismatch = "https://idemkit.dev/problems/mismatch"
	// ProblemUnavailable: the idempotency store could not be read or
	// written; the handler did not run. Status 503, with Retry-After.
	ProblemUnavailable = "https://idemkit.dev/problems/unavailable"
	// ProblemOutcomeUnknown: an earlier attempt's lease ended and nobody can
	// tell yet whether it took effect; the handler does not run until
	// recovery decides. Status Options.UnknownStatus (503 by default), with
	// Retry-After while recovery will ask again.
	ProblemOutcomeUnknown = "https://idemkit.dev/problems/outcome-unknown"
	// ProblemOutcomeNotRecorded: the handler ran but the store could not
	// record its outcome (idem.ErrOutcomeNotRecorded). Status 500, no
	// Retry-After: the effect may have happened, and a retry with the key
	// is held until recovery resolves the claim, never run a second time.
	// The middleware answers it instead of the handler's response, which is
	// dropped (unless it was already streaming); OnError sees the error.
	ProblemOutcomeNotRecorded = "https://idemkit.dev/problems/outcome-not-recorded"
	// ProblemRanTwice: the handler ran, but it stalled past its claim's
	// lease (and the recovery grace), and another attempt with the key
	// claimed it before this one's outcome was recorded
	// (idem.ErrRanTwice). The other attempt's outcome is the recorded one,
	// and a retry with the key gets it (or 409 in-progress while it runs);
	// the key is marked as having possibly run twice. Status 409, with
	// Retry-After. The handler's response is dropped; OnError sees the
	// error.
	ProblemRanTwice = "https://idemkit.dev/problems/ran-twice"
	// ProblemResponseNotKept: the request ran once, but its response was
	// not saved: it was larger than Options.MaxResponseBytes, and the status
	// is the one the first run answered; or the middleware could not
	// capture it (the handler hijacked the connection or wrote around the
	// recorder), and the status is 500, since no status of the first run is
	// known. The header Idempotent-Replayed is set; the handler does not run
	// again.
	ProblemResponseNotKept = "https://idemkit.dev/problems/response-not-kept"
	// ProblemSavedError: the request ran once and failed with an error that
	// the store's policy (or a Resolver) saved without an HTTP status.
	// Status 500, replayed.
	ProblemSavedError = "https://idemkit.dev/problems/saved-error"
)

// ProblemContentType is the media type of problem responses (RFC 9457).
const ProblemContentType = "application/problem+json"

// Problem is an RFC 9457 problem details object as the middleware writes it
// and the Transport reads it. It names the key, never the request body.
type Problem struct {
	// Type is one of the Problem* URIs.
	Type string `json:"type"`
	// Title is a short, fixed summary of the problem type.
	Title string `json:"title"`
	// Status repeats the HTTP status code.
	Status int `json:"status"`
	// Detail explains this occurrence, naming the key.
	Detail string `json:"detail,omitempty"`
	// Key is the idempotency key concerned, when there is one.
	Key string `json:"key,omitempty"`
	// RetryAfter repeats the Retry-After header in seconds, when set.
	RetryAfter int `json:"retry_after,omitempty"`
}

func (p *Problem) Error() string {
	if p.Detail != "" {
		return fmt.Sprintf("%d %s: %s", p.Status, p.Title, p.Detail)
	}
	return fmt.Sprintf("%d %s", p.Status, p.Title)
}

// writeProblem answers with p as application/problem+json. A positive
// retryAfter also sets the Retry-After header, in whole seconds rounded up.
func writeProblem(w http.ResponseWriter, p Problem, retryAfter time.Duration) {
	h := w.Header()
	h.Del("Content-Length")
	h.Set("Content-Type", ProblemContentType)
	h.Set("Cache-Control", "no-store")
	if retryAfter > 0 {
		p.RetryAfter = retryAfterSeconds(retryAfter)
		h.Set("Retry-After", strconv.Itoa(p.RetryAfter))
	}
	b, err := json.Marshal(p)
	if err != nil {
		// Problem holds only strings and ints: Marshal cannot fail.
		panic(err)
	}
	w.WriteHeader(p.Status)
	_, _ = w.Write(append(b, '\n'))
}

// retryAfterSeconds rounds d up to whole seconds, at least one.
func retryAfterSeconds(d time.Duration) int {
	s := int((d + time.Second - 1) / time.Second)
	return max(s, 1)
}
