package idemhttp

import (
	"context"
	"net/http"
	"strconv"

	"github.com/idemkit/idem"
)

// HeaderFencingToken carries the fencing token of the claim whose effect
// sends a request downstream (see SetFence).
const HeaderFencingToken = "Idempotency-Fencing-Token"

// SetFence sets, on an outgoing request that an effect run by idem sends
// to a downstream service, the Idempotency-Key header to the claim's key
// and the Idempotency-Fencing-Token header to its token, from the claim in
// ctx (idem.ClaimFromContext). It reports false, and changes nothing, when
// ctx carries no claim.
//
// A downstream that stores the highest token it has seen per key (or per
// resource) and refuses a request with a lower one (409) never acts for a
// holder whose claim was recovered and taken over, however late its
// request arrives. A downstream that deduplicates by key itself
// (Stripe-like idempotency keys) is safe with the key alone as long as it
// keeps the key longer than the effect can be retried: a late request
// with the same key gets the first one's answer instead of acting again.
// Use the same key there as here only when the downstream effect is the
// whole of this effect; otherwise derive one (idem.KeyDeriver.Effect).
func SetFence(ctx context.Context, r *http.Request) bool {
	c, ok := idem.ClaimFromContext(ctx)
	if !ok {
		return false
	}
	r.Header.Set(HeaderKey, c.Key())
	r.Header.Set(HeaderFencingToken, strconv.FormatUint(c.Token(), 10))
	return true
}
