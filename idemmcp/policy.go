package idemmcp

import (
	"errors"

	"github.com/idemkit/idem"
)

// ToolErrorPolicy is an idem.Policy for stores behind a Guard that should
// replay tool errors: it saves a tool's answer whether or not it is an
// error (isError), so a repeat gets the same refusal the model saw first,
// and releases the claim on a protocol error or a Go error (a retry runs
// again), as idem.DefaultPolicy does. Set it as the store's
// idem.Options.Policy. Under idem.DefaultPolicy, the store's default, a
// tool error is released: the next call with the key runs the tool again.
func ToolErrorPolicy(res idem.Result, err error) idem.Decision {
	var te *ToolError
	if errors.As(err, &te) {
		return idem.DecisionSave
	}
	return idem.DefaultPolicy(res, err)
}
