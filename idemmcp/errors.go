package idemmcp

import (
	"errors"
	"fmt"
	"strings"
)

// ErrUnauthenticated is returned by an Options.Scope function, or wrapped
// by the error of a refused call, when a call carries no principal to scope
// its key by and the server did not say that callers share one scope.
var ErrUnauthenticated = errors.New("idemmcp: call not authenticated")

// ToolError is the error a protected tool's outcome hands to the store's
// idem.Policy when the tool answered with isError: the model was told the
// call failed. idem.DefaultPolicy releases the claim, so a retry runs the
// tool again; ToolErrorPolicy saves it, so a retry gets the same answer.
type ToolError struct {
	// Tool is the tool's name.
	Tool string
	// Message is the text content of the tool's answer.
	Message string
}

func (e *ToolError) Error() string {
	return fmt.Sprintf("idemmcp: tool %s answered with an error: %s", e.Tool, e.Message)
}

// RetryError is returned by Client.CallTool when it gives up: every attempt
// failed on the transport or was answered "in progress" or "unavailable",
// and no attempt or time is left.
type RetryError struct {
	// Tool and Key name the call.
	Tool, Key string
	// Attempts counts the attempts made.
	Attempts int
	// Status is the idempotency status of the last answer (StatusInProgress,
	// StatusUnavailable), empty if the last attempt got no answer.
	Status string
	// Err is the last attempt's error, nil if it got an answer.
	Err error
	// Reason says why retrying stopped: "attempts", "deadline" or "canceled".
	Reason string
}

func (e *RetryError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "idemmcp: tools/call %s with key %q: gave up after %d attempt", e.Tool, e.Key, e.Attempts)
	if e.Attempts != 1 {
		b.WriteByte('s')
	}
	switch e.Reason {
	case "deadline", "canceled":
		fmt.Fprintf(&b, " (%s)", e.Reason)
	}
	switch {
	case e.Err != nil:
		fmt.Fprintf(&b, ": %v", e.Err)
	case e.Status != "":
		fmt.Fprintf(&b, ": last answer %s", e.Status)
	}
	return b.String()
}

// Unwrap returns the last attempt's error.
func (e *RetryError) Unwrap() error { return e.Err }
