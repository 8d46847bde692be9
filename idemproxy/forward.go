package idemproxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
)

// Problem type URIs of the answers the proxy writes when the upstream did
// not answer. The middleware's own (idemhttp.Problem*) cover the rest.
const (
	// ProblemUpstreamUnreachable: the upstream could not be connected to,
	// so the request was not sent. Status 502; the claim is released and a
	// retry with the key runs.
	ProblemUpstreamUnreachable = "https://idemkit.dev/problems/upstream-unreachable"
	// ProblemUpstreamOutcomeUnknown: the request was sent and the upstream
	// dropped the connection (502) or gave no answer within
	// Options.Timeout (504). It may have acted: the claim is held, and a
	// retry with the key gets 503 outcome-unknown until the resolver (or an
	// operator) settles it.
	ProblemUpstreamOutcomeUnknown = "https://idemkit.dev/problems/upstream-outcome-unknown"
)

// hopHeaders are the hop-by-hop headers a proxy does not forward (RFC 9110
// section 7.6.1), with HeaderOutcome, which only the proxy sets.
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade", HeaderOutcome}

// removeHop deletes the hop-by-hop headers from h, those that its
// Connection header names included.
func removeHop(h http.Header) {
	for _, v := range h.Values("Connection") {
		for _, name := range strings.Split(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
}

// ServeHTTP forwards r to the upstream and copies its answer to w. Inside
// the middleware (a guarded request), the answer goes to the middleware's
// recorder, which saves it before the client sees it.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request) {
	_, guarded := idem.ClaimFromContext(r.Context())
	note := noteOf(r)
	if guarded {
		note.ran = true
		p.at(PointClaimed, r)
	}
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.Host = ""
	out.URL.Scheme, out.URL.Host = p.upstream.Scheme, p.upstream.Host
	out.URL.Path = joinPath(p.upstream.Path, r.URL.Path)
	out.URL.RawPath = ""
	removeHop(out.Header)
	if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		if prior := out.Header.Values("X-Forwarded-For"); len(prior) > 0 {
			ip = strings.Join(prior, ", ") + ", " + ip
		}
		out.Header.Set("X-Forwarded-For", ip)
	}
	out.Header.Set("X-Forwarded-Host", r.Host)
	if out.ContentLength == 0 && guarded {
		out.Body = nil // the middleware read it: nothing to send
	}

	// sent turns true once any byte of the request may have left: from
	// then on, a failure is an unknown outcome.
	var sent atomic.Bool
	trace := &httptrace.ClientTrace{WroteHeaderField: func(string, []string) { sent.Store(true) }}
	out = out.WithContext(httptrace.WithClientTrace(out.Context(), trace))
	resp, err := p.transport.RoundTrip(out)
	if err != nil {
		p.failed(w, r, err, sent.Load())
		return
	}
	defer resp.Body.Close()
	removeHop(resp.Header)
	if isStream(resp) {
		p.stream(w, r, resp)
		return
	}
	// Read the answer whole (up to the bytes kept) before any of it goes
	// out: a body cut off here is an unknown outcome, answered as one.
	head, err := io.ReadAll(io.LimitReader(resp.Body, int64(p.maxResponse)+1))
	if err != nil {
		p.failed(w, r, err, true)
		return
	}
	note.upstream = "answered"
	p.at(PointUpstreamAnswered, r)
	copyHeader(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(head)
	if len(head) > p.maxResponse {
		// Larger than kept: it streams to this caller, and the record says
		// it ran with this status (a repeat gets response-not-kept). A cut
		// in the rest cannot be taken back, and the record stays true.
		_, _ = io.Copy(w, resp.Body)
	}
}

// stream copies an event stream as it comes, flushing each piece. Once the
// status went out, a failure cannot be answered: the connection is
// aborted, and a guarded request's claim is held (the proxy's store always
// has a Resolver).
func (p *Proxy) stream(w http.ResponseWriter, r *http.Request, resp *http.Response) {
	noteOf(r).upstream = "streaming"
	copyHeader(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				panic(http.ErrAbortHandler)
			}
			_ = rc.Flush()
		}
		if errors.Is(err, io.EOF) {
			p.at(PointUpstreamAnswered, r)
			return
		}
		if err != nil {
			p.logf(r, "upstream stream cut: %v", err)
			panic(http.ErrAbortHandler)
		}
	}
}

// isStream reports whether resp is an event stream, copied as it comes
// rather than read whole first.
func isStream(resp *http.Response) bool {
	ct := resp.Header.Get("Content-Type")
	return strings.HasPrefix(strings.ToLower(strings.TrimSpace(ct)), "text/event-stream")
}

// failed answers a request the upstream did not answer: 502 not sent
// (released) when no byte of it left, else 502, or 504 on a timeout,
// outcome unknown (held).
func (p *Proxy) failed(w http.ResponseWriter, r *http.Request, err error, sent bool) {
	note := noteOf(r)
	key := r.Header.Get(idemhttp.HeaderKey)
	pb := idemhttp.Problem{Type: ProblemUpstreamUnreachable, Title: "Upstream unreachable",
		Status: http.StatusBadGateway, Key: key,
		Detail: "the upstream could not be reached and the request was not sent; a retry with the same key runs it"}
	outcome := OutcomeNotSent
	if sent {
		outcome = OutcomeUnknown
		pb = idemhttp.Problem{Type: ProblemUpstreamOutcomeUnknown, Title: "Upstream outcome unknown",
			Status: http.StatusBadGateway, Key: key,
			Detail: "the request was sent and the upstream dropped the connection before answering; it may have " +
				"acted, so it will not run again until the resolver or an operator settles the key"}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			pb.Status = http.StatusGatewayTimeout
			pb.Detail = fmt.Sprintf("the request was sent and the upstream did not answer within %s; it may have "+
				"acted, so it will not run again until the resolver or an operator settles the key", p.timeout)
		}
	}
	note.upstream = outcome
	p.logf(r, "upstream %s: %v", outcome, err)
	h := w.Header()
	h.Set(HeaderOutcome, outcome)
	h.Set("Content-Type", idemhttp.ProblemContentType)
	h.Set("Cache-Control", "no-store")
	b, _ := json.Marshal(pb) // strings and ints only
	w.WriteHeader(pb.Status)
	_, _ = w.Write(append(b, '\n'))
}

// copyHeader adds every value of src to dst.
func copyHeader(dst, src http.Header) {
	for k, v := range src {
		dst[k] = append(dst[k], v...)
	}
}

// joinPath joins the upstream's base path and the request's path with one
// slash between them.
func joinPath(base, path string) string {
	switch {
	case base == "" || base == "/":
		return path
	case strings.HasSuffix(base, "/") && strings.HasPrefix(path, "/"):
		return base + path[1:]
	case !strings.HasSuffix(base, "/") && !strings.HasPrefix(path, "/"):
		return base + "/" + path
	}
	return base + path
}
