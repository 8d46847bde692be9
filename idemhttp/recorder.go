package idemhttp

import (
	"bufio"
	"fmt"
	"net"
	"net/http"

	"github.com/idemkit/idem"
)

// recorder is the ResponseWriter the handler of a claimed request writes
// to. It keeps a copy of the response to save, and decides when the client
// sees it:
//
//   - Buffered (the start): the status and body are held back. When the
//     handler returns, the middleware saves the result first and only then
//     sends it, so a client never holds an answer the store may forget.
//   - Streaming: once the handler flushes, or its body outgrows the copy
//     kept, the status and what was buffered go out and every later write
//     goes straight through. The result is saved when the handler returns.
//
// A recorder is used by one handler goroutine, as a ResponseWriter is.
type recorder struct {
	w    http.ResponseWriter
	max  int         // the most body bytes kept in the copy
	orig http.Header // the header before the handler ran, for discard

	status    int         // final status; 0 until WriteHeader or the first Write
	snap      http.Header // the header as it was when the status was set
	body      []byte      // the copy kept (and, while buffered, the pending output)
	truncated bool        // the body outgrew max: no copy is kept
	streaming bool        // the status went out; writes go through
	werr      error       // the first error writing to w (a client gone)
	// uncaptured is set when the response left by a way the recorder does
	// not see: the handler hijacked the connection, or wrote to the writer
	// that Unwrap returns. What the client got is then unknown, and the
	// result records only that the request ran.
	uncaptured bool
}

var (
	_ http.Flusher                    = (*recorder)(nil)
	_ interface{ FlushError() error } = (*recorder)(nil)
	_ http.Hijacker                   = (*recorder)(nil)
)

func newRecorder(w http.ResponseWriter, max int) *recorder {
	return &recorder{w: w, max: max, orig: w.Header().Clone()}
}

// discard drops a buffered response: the header goes back to what it was
// before the handler ran (an outer middleware's stays), so that another
// answer can be written. It must not be called once streaming.
func (rw *recorder) discard() {
	h := rw.w.Header()
	for k := range h {
		delete(h, k)
	}
	for k, v := range rw.orig {
		h[k] = v
	}
	rw.body = nil
}

// Header returns the real header map, so headers set by outer middleware
// stay and the handler's go out as usual.
func (rw *recorder) Header() http.Header { return rw.w.Header() }

// WriteHeader records the status. Informational (1xx) statuses go straight
// to the client and are not saved; a second final status is ignored, as
// net/http ignores it.
func (rw *recorder) WriteHeader(code int) {
	if code < 100 || code > 999 {
		// net/http panics the same way; panicking here, inside the handler,
		// releases the claim instead of saving a status nobody can send.
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if rw.status != 0 {
		return
	}
	if code < 200 {
		rw.w.WriteHeader(code)
		return
	}
	rw.status = code
	rw.snap = rw.w.Header().Clone()
}

func (rw *recorder) Write(p []byte) (int, error) {
	if rw.status == 0 {
		rw.WriteHeader(http.StatusOK)
	}
	if !rw.truncated && len(rw.body)+len(p) > rw.max {
		// Too large to keep: send what was held back, stream the rest, and
		// save only the fact that the request ran.
		rw.commit()
		rw.truncated = true
		rw.body = nil
	}
	if !rw.truncated {
		rw.body = append(rw.body, p...)
	}
	if !rw.streaming {
		return len(p), nil
	}
	return rw.write(p)
}

// Flush sends the status and everything written so far, and switches to
// streaming. Handlers of server-sent events and progress streams keep
// working behind the middleware.
func (rw *recorder) Flush() { _ = rw.FlushError() }

// FlushError is Flush for http.ResponseController, reporting the error.
func (rw *recorder) FlushError() error {
	rw.commit()
	if rw.werr != nil {
		return rw.werr
	}
	return http.NewResponseController(rw.w).Flush()
}

// Hijack hands the connection to the handler, if the real writer can, and
// marks the response as not captured: what the handler sends on the
// connection is neither kept nor replayed, and the recorder sends nothing
// more.
func (rw *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(rw.w).Hijack()
	if err == nil {
		rw.uncaptured = true
	}
	return conn, brw, err
}

// Unwrap lets http.ResponseController reach the real writer for deadlines.
// It returns the real writer wrapped so that a handler writing through it,
// around the recorder, marks the response as not captured.
func (rw *recorder) Unwrap() http.ResponseWriter { return around{rw} }

// around is the writer Unwrap returns: the real writer, whose writes mark
// the recorder's response as not captured.
type around struct{ rw *recorder }

func (a around) Header() http.Header { return a.rw.w.Header() }

func (a around) WriteHeader(code int) {
	a.rw.uncaptured = true
	a.rw.w.WriteHeader(code)
}

func (a around) Write(p []byte) (int, error) {
	a.rw.uncaptured = true
	return a.rw.w.Write(p)
}

// Hijack is the recorder's: the connection is marked as taken over.
func (a around) Hijack() (net.Conn, *bufio.ReadWriter, error) { return a.rw.Hijack() }

// Unwrap reaches the real writer for deadlines and full duplex.
func (a around) Unwrap() http.ResponseWriter { return a.rw.w }

// commit sends the status and the buffered body, once. After a hijack it
// sends nothing: the connection is the handler's.
func (rw *recorder) commit() {
	if rw.streaming {
		return
	}
	if rw.uncaptured {
		rw.streaming = true
		return
	}
	if rw.status == 0 {
		rw.WriteHeader(http.StatusOK)
	}
	rw.streaming = true
	rw.w.WriteHeader(rw.status)
	if len(rw.body) > 0 {
		_, _ = rw.write(rw.body)
	}
}

func (rw *recorder) write(p []byte) (int, error) {
	if rw.werr != nil {
		return 0, rw.werr
	}
	n, err := rw.w.Write(p)
	if err != nil {
		rw.werr = err
	}
	return n, err
}

// result is what the store saves: the status (200 for a handler that wrote
// nothing), the allow-listed headers as they were when the status was set,
// and the body unless it was too large. A response not captured (hijacked,
// or written around the recorder) is saved as Truncated with no status,
// headers or body: the request ran, and what the client got is unknown.
func (rw *recorder) result(keep map[string]bool) idem.Result {
	if rw.uncaptured {
		return idem.Result{Truncated: true}
	}
	status, snap := rw.status, rw.snap
	if status == 0 {
		status, snap = http.StatusOK, rw.w.Header()
	}
	var saved map[string][]string
	for k, v := range snap {
		ck := http.CanonicalHeaderKey(k)
		if !keep[ck] || len(v) == 0 {
			continue
		}
		if saved == nil {
			saved = map[string][]string{}
		}
		saved[ck] = append(saved[ck], v...)
	}
	res := idem.Result{Status: status, Header: saved, Truncated: rw.truncated}
	if !rw.truncated && len(rw.body) > 0 {
		res.Body = rw.body
		// net/http sniffs a missing Content-Type from the body; save what it
		// sent so the replay says the same.
		if _, set := snap["Content-Type"]; !set && keep["Content-Type"] {
			if res.Header == nil {
				res.Header = map[string][]string{}
			}
			res.Header["Content-Type"] = []string{http.DetectContentType(rw.body)}
		}
	}
	return res
}
