package idemproxy

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/idemkit/idem"
)

// ResolveRequest is the JSON a proxy POSTs to the resolver URL about one
// stale claim: a request the proxy forwarded (or was about to) and whose
// outcome it never learned, because the upstream dropped the connection,
// did not answer in time, or the proxy itself stopped.
type ResolveRequest struct {
	// Scope and Key name the record; Key is the Idempotency-Key the
	// upstream received.
	Scope string `json:"scope"`
	Key   string `json:"key"`
	// Fingerprint is the digest of the request (method, route, media type
	// and body) that claimed the key.
	Fingerprint string `json:"fingerprint"`
	// ClaimedAt is when the stale claim was taken; FirstSeen when the key
	// was first claimed.
	ClaimedAt time.Time `json:"claimed_at"`
	FirstSeen time.Time `json:"first_seen"`
	// Holder names the proxy process that held the claim.
	Holder string `json:"holder"`
	// Claims counts the claims of the key so far; Checks the resolver's
	// earlier "unknown" answers about this one.
	Claims int `json:"claims"`
	Checks int `json:"checks"`
}

// ResolveAnswer is the JSON the resolver answers with (status 200).
type ResolveAnswer struct {
	// Verdict is "committed" (the upstream acted: the answer below is
	// saved and replayed to every repeat), "not_committed" (it did not:
	// the claim is released and the next retry runs) or "unknown" (it
	// cannot tell yet: the claim stays held and is asked about again
	// later, until an operator decides).
	Verdict string `json:"verdict"`
	// Status, Headers and Body are the answer to save when committed: the
	// response the upstream gave, or one equivalent to it. Body is text;
	// BodyBase64 carries bytes that are not (one of the two, not both).
	// For idem mcp-proxy, Status and Headers are left out and Body is the
	// tool's CallToolResult as JSON (idemmcp.SavedResult).
	Status     int                 `json:"status,omitempty"`
	Headers    map[string][]string `json:"headers,omitempty"`
	Body       string              `json:"body,omitempty"`
	BodyBase64 string              `json:"body_base64,omitempty"`
}

// HTTPResolver is an idem.Resolver that asks a URL: it POSTs a
// ResolveRequest and reads a ResolveAnswer. Anything but a 200 with a
// well-formed answer (a timeout, a 500, malformed JSON, an unknown
// verdict) counts as unknown: the claim stays held, never re-run on a
// guess. It is safe for concurrent use.
type HTTPResolver struct {
	// URL receives the POST.
	URL string
	// Client sends it. Default an http.Client with a 10-second timeout.
	Client *http.Client
}

var _ idem.Resolver = (*HTTPResolver)(nil)

// maxAnswerBytes bounds a resolver's answer.
const maxAnswerBytes = 8 << 20

// Resolve asks r.URL about rec.
func (r *HTTPResolver) Resolve(ctx context.Context, rec *idem.Record) (idem.Resolution, error) {
	body, err := json.Marshal(ResolveRequest{Scope: rec.Scope, Key: rec.Key, Fingerprint: rec.Fingerprint,
		ClaimedAt: rec.ClaimedAt, FirstSeen: rec.FirstSeen, Holder: rec.Owner, Claims: rec.Claims, Checks: rec.Checks})
	if err != nil {
		return idem.Resolution{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.URL, bytes.NewReader(body))
	if err != nil {
		return idem.Resolution{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	client := r.Client
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	resp, err := client.Do(req)
	if err != nil {
		return idem.Resolution{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return idem.Resolution{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return idem.Resolution{}, fmt.Errorf("idemproxy: resolver answered %d", resp.StatusCode)
	}
	return ParseAnswer(raw)
}

// ParseAnswer reads a resolver's JSON answer. It returns an error for a
// malformed one, which the store counts as unknown.
func ParseAnswer(raw []byte) (idem.Resolution, error) {
	var a ResolveAnswer
	if err := json.Unmarshal(raw, &a); err != nil {
		return idem.Resolution{}, fmt.Errorf("idemproxy: resolver answer: %w", err)
	}
	switch a.Verdict {
	case "unknown":
		return idem.Resolution{Verdict: idem.VerdictUnknown}, nil
	case "not_committed":
		return idem.Resolution{Verdict: idem.VerdictNotCommitted}, nil
	case "committed":
	default:
		return idem.Resolution{}, fmt.Errorf("idemproxy: resolver verdict %q: want committed, not_committed or unknown", a.Verdict)
	}
	if a.Status != 0 && (a.Status < 100 || a.Status > 599) {
		return idem.Resolution{}, fmt.Errorf("idemproxy: resolver answered committed with status %d", a.Status)
	}
	if a.Body != "" && a.BodyBase64 != "" {
		return idem.Resolution{}, errors.New("idemproxy: resolver answer has both body and body_base64")
	}
	b := []byte(a.Body)
	if a.BodyBase64 != "" {
		var err error
		if b, err = base64.StdEncoding.DecodeString(a.BodyBase64); err != nil {
			return idem.Resolution{}, fmt.Errorf("idemproxy: resolver body_base64: %w", err)
		}
	}
	h := map[string][]string{}
	for k, v := range a.Headers {
		h[http.CanonicalHeaderKey(k)] = v
	}
	removeHop(h)
	return idem.Resolution{Verdict: idem.VerdictCommitted, Result: idem.Result{Status: a.Status, Header: h, Body: b}}, nil
}

// HoldResolver is the Resolver of a proxy without a resolver URL: it
// answers unknown about every stale claim, so the claim is held (and,
// after the store's MaxUnknown answers, marked as needing attention) until
// an operator settles it (idem resolve, idem admin). It never lets a
// stale claim run again. The zero value is ready to use.
type HoldResolver struct{}

var _ idem.Resolver = HoldResolver{}

// Resolve answers unknown.
func (HoldResolver) Resolve(context.Context, *idem.Record) (idem.Resolution, error) {
	return idem.Resolution{Verdict: idem.VerdictUnknown}, nil
}
