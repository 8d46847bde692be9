package idemhttp

import (
	"net/http"

	"github.com/idemkit/idem"
)

// DownstreamKeys is an http.RoundTripper for the requests an effect run by
// idem sends to APIs that deduplicate by an Idempotency-Key of their own,
// as most payment APIs do. On a request made with the effect's context it
// sets the Idempotency-Key header to idem.DownstreamKey of the claim and
// Name: the same key in every attempt of the effect, the one that runs
// after recovery decided "not committed" included, so that the downstream
// answers a second attempt's request with the first one's result instead
// of acting twice.
//
// A request that already has an Idempotency-Key header is sent as it is:
// the caller chose its key. A request made outside an effect (its context
// carries no claim) is sent as it is too, without a key. The request is
// never modified: the header is set on a copy.
//
// The zero value derives the key from the request's method and URL path,
// so each endpoint gets its own: an effect that makes two distinct
// requests to one endpoint (two charges) gives them different Names
// (two DownstreamKeys, or a header set by idem.DownstreamKey itself).
type DownstreamKeys struct {
	// Base sends the requests. Default http.DefaultTransport.
	Base http.RoundTripper
	// Name is what the key is derived from, beside the claim's scope and
	// key ("payments"). Default the request's method and URL path
	// ("POST /v1/refunds").
	Name string
}

// RoundTrip sends r through Base with the effect's downstream key, as the
// type's doc says.
func (d DownstreamKeys) RoundTrip(r *http.Request) (*http.Response, error) {
	base := d.Base
	if base == nil {
		base = http.DefaultTransport
	}
	if r.Header.Get(HeaderKey) != "" {
		return base.RoundTrip(r)
	}
	name := d.Name
	if name == "" {
		name = r.Method + " " + r.URL.Path
	}
	key, err := idem.DownstreamKey(r.Context(), name)
	if err != nil {
		return base.RoundTrip(r) // outside an effect
	}
	r2 := r.Clone(r.Context())
	if r2.Header == nil {
		r2.Header = make(http.Header)
	}
	r2.Header.Set(HeaderKey, key)
	return base.RoundTrip(r2)
}
