package idemproxy

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/idemhttp"
)

// ParseScope returns the Options.Scope that spec names. A proxy cannot see
// who called, so the scope is a decision the operator writes down:
//
//	header:NAME   the value of header NAME, which the gateway in front of
//	              the proxy sets after it authenticated the caller (a
//	              tenant or subject id, never a token). A request without
//	              it is refused with 401, never put in a default scope; one
//	              that sends it twice is refused with 400.
//	fixed:NAME    the one scope NAME: every caller shares it, and several
//	              proxies on one store keep their keys apart.
//	shared        the one empty scope: a single-tenant server whose callers
//	              may replay each other's responses.
//
// It returns an error naming the forms for any other spec.
func ParseScope(spec string) (func(*http.Request) (string, error), error) {
	kind, arg, _ := strings.Cut(spec, ":")
	switch {
	case spec == "shared":
		return idemhttp.SharedScope, nil
	case kind == "header" && arg != "":
		name := http.CanonicalHeaderKey(arg)
		return func(r *http.Request) (string, error) {
			v := r.Header.Values(name)
			switch {
			case len(v) == 0 || v[0] == "":
				return "", fmt.Errorf("no %s header: %w", name, idemhttp.ErrUnauthenticated)
			case len(v) > 1:
				return "", fmt.Errorf("the %s header was sent %d times", name, len(v))
			}
			return v[0], nil
		}, nil
	case kind == "fixed" && arg != "":
		if err := backend.ValidateScope(arg); err != nil {
			return nil, fmt.Errorf("scope %q: %w", spec, err)
		}
		return func(*http.Request) (string, error) { return arg, nil }, nil
	}
	return nil, fmt.Errorf("%w: scope %q: want header:NAME (set by the gateway that authenticated the caller), "+
		"fixed:NAME or shared", ErrInvalidOptions, spec)
}
