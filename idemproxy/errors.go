package idemproxy

import "errors"

// ErrInvalidOptions is returned by New and ParseScope when the
// configuration makes no sense; the error's text names what.
var ErrInvalidOptions = errors.New("idemproxy: invalid options")

// UpstreamError is returned by an MCP proxy's tool call whose upstream
// did not answer. Policy holds the claim when Sent (the call may have
// acted) and releases it otherwise.
type UpstreamError struct {
	// Sent is true once the call may have reached the upstream.
	Sent bool
	// Err is the transport's error.
	Err error
}

func (e *UpstreamError) Error() string {
	if e.Sent {
		return "idemproxy: the upstream was sent the call and did not answer (outcome unknown): " + e.Err.Error()
	}
	return "idemproxy: the upstream could not be reached (the call was not sent): " + e.Err.Error()
}

// Unwrap returns the transport's error.
func (e *UpstreamError) Unwrap() error { return e.Err }
