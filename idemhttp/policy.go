package idemhttp

import (
	"net/http"

	"github.com/idemkit/idem"
)

// StatusPolicy is an idem.Policy for stores behind the middleware: it
// releases the claim on a returned error, a 5xx, 408 Request Timeout, 425
// Too Early and 429 Too Many Requests (answers that say "try again", after
// which a retry must run) and saves every other response. Set it as the
// store's idem.Options.Policy. idem.DefaultPolicy, the store's default,
// saves 408, 425 and 429 like any 4xx, so a rate-limited request would
// replay its 429 until the record expires.
func StatusPolicy(res idem.Result, err error) idem.Decision {
	switch {
	case err != nil, res.Status >= 500:
		return idem.DecisionRelease
	case res.Status == http.StatusRequestTimeout, res.Status == http.StatusTooEarly,
		res.Status == http.StatusTooManyRequests:
		return idem.DecisionRelease
	}
	return idem.DecisionSave
}
