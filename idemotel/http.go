package idemotel

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
)

// MiddlewareSpanName is the name of the span Middleware starts.
const MiddlewareSpanName = "idem.request"

// maxProblemBytes bounds the problem+json body read back for its type.
const maxProblemBytes = 2048

type runKey struct{}

// Middleware wraps an idemhttp middleware (the value idemhttp.Middleware
// returns) so that every request carrying one Idempotency-Key gets a span
// named MiddlewareSpanName, with the attributes Do sets and the HTTP
// status. Requests without the header, or with it twice, pass through
// with no span: they are idemhttp's to refuse or let through. The
// handler's context carries the span. s is the store idemMiddleware runs
// on; it must have t as its Observer.
//
//	mw := tel.Middleware(store, idemhttp.Middleware(store, opts))
//	mux.Handle("POST /refunds", mw(refunds))
func (t *Telemetry) Middleware(s *idem.Store, idemMiddleware func(http.Handler) http.Handler) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		inner := idemMiddleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if run, ok := r.Context().Value(runKey{}).(*reqRun); ok {
				run.claimed(r.Context(), s, trace.SpanFromContext(r.Context()))
				if !run.ran {
					run.answer = OutcomeSkipped
				}
			}
			next.ServeHTTP(w, r)
		}))
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			values := r.Header.Values(idemhttp.HeaderKey)
			if len(values) != 1 {
				inner.ServeHTTP(w, r)
				return
			}
			key := headerKey(values[0])
			ctx, span := t.tracer.Start(r.Context(), MiddlewareSpanName, trace.WithSpanKind(trace.SpanKindInternal),
				trace.WithAttributes(attribute.String(AttrKeyDigest, t.digest(key))))
			defer span.End()
			if !span.IsRecording() {
				inner.ServeHTTP(w, r.WithContext(ctx))
				return
			}
			run := &reqRun{learnScope: true}
			rw := &responseWriter{ResponseWriter: w}
			wt := t.watch("", key, true)
			finished := false
			defer func() {
				if !finished {
					run.panicked = true
					annotate(span, t.unwatch(wt), *run)
				}
			}()
			inner.ServeHTTP(rw, r.WithContext(context.WithValue(ctx, runKey{}, run)))
			finished = true
			status := rw.status
			if status == 0 {
				status = http.StatusOK
			}
			if !run.ran && run.answer == "" {
				run.answer = answerOf(rw, status)
			}
			run.failed = status >= 500
			span.SetAttributes(attribute.Int(AttrHTTPStatus, status))
			annotate(span, t.unwatch(wt), *run)
		})
	}
}

// headerKey reads a key as idemhttp does: bare, or as a quoted string.
func headerKey(v string) string {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		return strings.NewReplacer(`\"`, `"`, `\\`, `\`).Replace(v[1 : len(v)-1])
	}
	return v
}

// answerOf names the answer of a request whose handler did not run, from
// the response idemhttp gave: a replay is marked, a refusal is a problem
// whose type names it.
func answerOf(rw *responseWriter, status int) string {
	if rw.replayed {
		return OutcomeReplayed
	}
	var p struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(rw.problem.Bytes(), &p)
	switch p.Type {
	case idemhttp.ProblemInProgress:
		return OutcomeInProgress
	case idemhttp.ProblemMismatch:
		return OutcomeMismatch
	case idemhttp.ProblemOutcomeUnknown:
		return OutcomeUnknown
	case idemhttp.ProblemUnavailable:
		return OutcomeUnavailable
	}
	switch {
	case status == http.StatusConflict:
		return OutcomeInProgress
	case status == http.StatusUnprocessableEntity:
		return OutcomeMismatch
	case status >= 500:
		return OutcomeUnavailable
	default:
		return OutcomeInvalid
	}
}

// responseWriter notes the status, the replay mark and the start of a
// problem body. It passes Flush on and unwraps for http.ResponseController.
type responseWriter struct {
	http.ResponseWriter
	status   int
	replayed bool
	isProb   bool
	problem  bytes.Buffer
}

func (w *responseWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
		h := w.Header()
		w.replayed = h.Get(idemhttp.HeaderReplayed) == "true"
		w.isProb = strings.HasPrefix(h.Get("Content-Type"), idemhttp.ProblemContentType)
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *responseWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.isProb && w.problem.Len() < maxProblemBytes {
		w.problem.Write(b[:min(len(b), maxProblemBytes-w.problem.Len())])
	}
	return w.ResponseWriter.Write(b)
}

// Flush passes a flush on, when the underlying writer can.
func (w *responseWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap returns the underlying writer, for http.ResponseController.
func (w *responseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
