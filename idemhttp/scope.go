package idemhttp

import (
	"context"
	"fmt"
	"net/http"

	"github.com/idemkit/idem"
)

// SharedScope is an Options.Scope for a server with a single tenant: every
// request's key lives in the one empty scope, so any caller who sends a key
// that another caller used gets that caller's response (or a 422 telling
// it that the key exists). Use it only when every caller may see every
// other caller's responses; otherwise scope by principal (PrincipalScope).
func SharedScope(*http.Request) (string, error) { return "", nil }

// principalKey is the context key of the principal WithPrincipal sets.
type principalKey struct{}

// WithPrincipal returns a copy of ctx that carries subject, the stable
// identity of the caller that the server's authentication layer verified
// (a user id, a service account, a tenant id; never a token or a session
// id, which change between retries). Call it in that layer, after the
// credentials were checked, for PrincipalScope to read:
//
//	r = r.WithContext(idemhttp.WithPrincipal(r.Context(), claims.Subject))
func WithPrincipal(ctx context.Context, subject string) context.Context {
	return context.WithValue(ctx, principalKey{}, subject)
}

// PrincipalFromContext returns the subject WithPrincipal put in ctx.
func PrincipalFromContext(ctx context.Context) (string, bool) {
	s, ok := ctx.Value(principalKey{}).(string)
	return s, ok && s != ""
}

// PrincipalScope is an Options.Scope that scopes each key by the verified
// subject WithPrincipal put in the request's context. A request without
// one is refused with 401 (the error wraps ErrUnauthenticated) and its
// handler does not run: mount the middleware inside the authentication
// layer. The subject must be a valid idem scope (backend.ValidateScope), or
// the request gets 400.
func PrincipalScope(r *http.Request) (string, error) {
	if s, ok := PrincipalFromContext(r.Context()); ok {
		return s, nil
	}
	return "", fmt.Errorf("no verified principal in the request context: %w", ErrUnauthenticated)
}

// KeyFromContext returns the idempotency key of the request whose handler
// runs with ctx, as the store holds it: unquoted, whichever form the client
// sent ("abc" and abc are the same key). Pass this key downstream, never
// the raw Idempotency-Key header. It reports false outside a handler that
// the middleware runs.
func KeyFromContext(ctx context.Context) (string, bool) {
	c, ok := idem.ClaimFromContext(ctx)
	if !ok {
		return "", false
	}
	return c.Key(), true
}
