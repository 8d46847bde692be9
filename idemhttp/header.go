package idemhttp

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
)

// Header names of the Idempotency-Key contract.
const (
	// HeaderKey carries the idempotency key of a request.
	HeaderKey = "Idempotency-Key"
	// HeaderReplayed is set to "true" on a response replayed from the store.
	HeaderReplayed = "Idempotent-Replayed"
)

// WithKey returns a shallow copy of req (its headers cloned) that carries
// key in the Idempotency-Key header. Derive the key once per intended
// effect, when the agent plans it (idem.KeyDeriver), and send
// the same key on every retry, restart and replay of that effect.
func WithKey(req *http.Request, key string) *http.Request {
	r := req.Clone(req.Context())
	r.Header.Set(HeaderKey, key)
	return r
}

// parseKey reads the key from the header values. The key is accepted both
// bare (abc, as Stripe sends it) and as a structured-field string ("abc",
// as the IETF draft writes it); both forms name the same key.
func parseKey(values []string) (string, error) {
	if len(values) > 1 {
		return "", fmt.Errorf("%w: the %s header was sent %d times", idem.ErrInvalidKey, HeaderKey, len(values))
	}
	v := values[0]
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		u, ok := unquote(v[1 : len(v)-1])
		if !ok {
			return "", fmt.Errorf("%w: malformed quoted string", idem.ErrInvalidKey)
		}
		v = u
	}
	if err := backend.ValidateKey(v); err != nil {
		return "", err
	}
	return v, nil
}

// unquote decodes the inside of an RFC 8941 string: backslash escapes only
// a quote or a backslash, and a bare quote is not allowed.
func unquote(s string) (string, bool) {
	if !strings.ContainsAny(s, `"\`) {
		return s, true
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"':
			return "", false
		case '\\':
			i++
			if i == len(s) || (s[i] != '"' && s[i] != '\\') {
				return "", false
			}
			b.WriteByte(s[i])
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), true
}
