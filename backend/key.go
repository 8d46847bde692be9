package backend

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxKeyLen is the longest idempotency key accepted, in bytes.
const MaxKeyLen = 255

// MaxScopeLen is the longest scope accepted, in bytes.
const MaxScopeLen = 255

// ValidateKey returns nil if key is 1 to MaxKeyLen printable ASCII
// characters (0x20 to 0x7E), and an error wrapping ErrInvalidKey otherwise.
func ValidateKey(key string) error {
	if len(key) == 0 {
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	}
	if len(key) > MaxKeyLen {
		return fmt.Errorf("%w: %d bytes, more than %d", ErrInvalidKey, len(key), MaxKeyLen)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("%w: byte 0x%02x at offset %d is not printable ASCII", ErrInvalidKey, c, i)
		}
	}
	return nil
}

// ReservedScopePrefix starts every scope that idem keeps for its own
// records, such as JournalScope. ValidateScope refuses such scopes, so that
// a caller's key can never land where idem's own recovery rules apply (a
// stale claim in JournalScope is run again without asking the Resolver).
const ReservedScopePrefix = "idem."

// ValidateScope returns nil if scope is at most MaxScopeLen bytes of valid
// UTF-8 without control characters, and does not start with
// ReservedScopePrefix; otherwise an error wrapping ErrInvalidKey. The empty
// scope is valid: it is the default scope of a store that serves one
// tenant.
func ValidateScope(scope string) error {
	if reservedScope(scope) {
		return fmt.Errorf("%w: scopes starting with %q are reserved for idem's own records", ErrInvalidKey, ReservedScopePrefix)
	}
	return ValidateStoredScope(scope)
}

// ValidateStoredScope is ValidateScope without the reservation: it accepts
// every scope a Store may write, idem's own (ReservedScopePrefix) included.
// Backends check the scopes they are given and read with it.
func ValidateStoredScope(scope string) error {
	if len(scope) > MaxScopeLen {
		return fmt.Errorf("%w: scope of %d bytes, more than %d", ErrInvalidKey, len(scope), MaxScopeLen)
	}
	if !utf8.ValidString(scope) {
		return fmt.Errorf("%w: scope is not valid UTF-8", ErrInvalidKey)
	}
	for _, r := range scope {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return fmt.Errorf("%w: scope holds control character %U", ErrInvalidKey, r)
		}
	}
	return nil
}

func reservedScope(scope string) bool { return strings.HasPrefix(scope, ReservedScopePrefix) }
