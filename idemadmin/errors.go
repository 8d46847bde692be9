package idemadmin

import "errors"

// The errors of the operator's views.
var (
	// ErrUnauthenticated is wrapped by an Authorizer's error when the request
	// carries no credentials it accepts; Handler answers 401.
	ErrUnauthenticated = errors.New("idemadmin: request not authenticated")

	// ErrBadSettle is wrapped by the error of a SettleRequest that lacks a
	// field it needs.
	ErrBadSettle = errors.New("idemadmin: malformed settle request")
)
