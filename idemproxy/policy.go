package idemproxy

import (
	"errors"
	"slices"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
)

// HeaderOutcome is set by the proxy on the answers it writes itself when
// the upstream did not answer: OutcomeNotSent or OutcomeUnknown. Policy
// reads it from the recorded result; the proxy removes it from every
// upstream response, so an upstream cannot set it.
const HeaderOutcome = "Idem-Proxy-Outcome"

// Values of HeaderOutcome.
const (
	// OutcomeNotSent: the request never reached the upstream (it could not
	// be connected to), so it did not act. The claim is released and a
	// retry runs.
	OutcomeNotSent = "not-sent"
	// OutcomeUnknown: the request was sent, and the upstream dropped the
	// connection or did not answer in time. It may have acted: the claim is
	// held for the resolver, never run again on a guess.
	OutcomeUnknown = "unknown"
)

// Policy is the idem.Policy a proxy's store needs (idem.Options.Policy):
// an answer the HTTP proxy marked OutcomeUnknown, and an MCP call whose
// UpstreamError says it was sent, are held; everything else is decided by
// idemhttp.StatusPolicy (an upstream's 5xx, 408, 425 and 429, OutcomeNotSent,
// and any error, such as an MCP tool error, release the claim; every other
// answer is saved).
func Policy(res idem.Result, err error) idem.Decision {
	var ue *UpstreamError
	if slices.Contains(res.Header[HeaderOutcome], OutcomeUnknown) || errors.As(err, &ue) && ue.Sent {
		return idem.DecisionHold
	}
	return idemhttp.StatusPolicy(res, err)
}
