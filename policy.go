package idem

// Decision is what the error policy does with the outcome of an effect.
type Decision uint8

const (
	// DecisionRelease ends the claim without saving: the next request with the key
	// runs the effect again. The default for returned errors and statuses
	// of 500 and above, and for panics when the Store has no Resolver.
	DecisionRelease Decision = iota
	// DecisionSave stores the outcome as the key's result; every repeat replays it,
	// errors included (as Stripe replays a saved 500).
	DecisionSave
	// DecisionHold leaves the claim in progress with its lease ended, for recovery
	// to resolve with the Resolver once Options.RecoveryGrace has passed: for
	// ambiguous outcomes such as a downstream timeout, where running again
	// might do the effect twice.
	DecisionHold
)

// String returns "release", "save" or "hold".
func (d Decision) String() string {
	switch d {
	case DecisionSave:
		return "save"
	case DecisionHold:
		return "hold"
	default:
		return "release"
	}
}

// Policy decides, for each outcome of an effect run by Store.Do, whether
// to save it, release the claim or hold it. A panic does not reach the
// Policy: it is an unknown outcome, held for the Resolver when the Store
// has one and released otherwise (see Store.Do).
type Policy func(res Result, err error) Decision

// DefaultPolicy releases on a returned error or a Status of 500 or more,
// and saves everything else.
func DefaultPolicy(res Result, err error) Decision {
	if err != nil || res.Status >= 500 {
		return DecisionRelease
	}
	return DecisionSave
}
