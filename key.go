package idem

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"
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

// DefaultKeyNamespace is the UUID namespace KeyDeriver uses when its
// Namespace is zero. Replace it with one of your own (any fixed UUID) so
// that keys derived by two applications never meet.
const DefaultKeyNamespace = "5c0a3a9e-8f1b-4d6e-a2c7-1d9e4b7f3a60"

// KeyDeriver derives idempotency keys on the agent side, once per intended
// effect, so that every retry, restart and replay of that effect sends the
// same key. The zero value uses DefaultKeyNamespace.
type KeyDeriver struct {
	// Namespace is the UUIDv5 namespace of the derived keys.
	Namespace uuid.UUID
}

func (d KeyDeriver) namespace() uuid.UUID {
	if d.Namespace == uuid.Nil {
		return uuid.MustParse(DefaultKeyNamespace)
	}
	return d.Namespace
}

// Step returns the key of a per-step effect: a UUIDv5 of the run id, the
// step number and the tool name. The same three always give the same key;
// changing any one gives another.
func (d KeyDeriver) Step(runID string, step int, tool string) string {
	return uuid.NewSHA1(d.namespace(), lengthPrefixed("step", runID, strconv.Itoa(step), tool)).String()
}

// Effect returns the key of a once-per-run effect on a business object, such
// as "refund:order-123": a UUIDv5 of the run id and the object. A model that
// asks at step 7 for what it did at step 4 gets the same key, so the effect
// still happens once.
func (d KeyDeriver) Effect(runID, object string) string {
	return uuid.NewSHA1(d.namespace(), lengthPrefixed("effect", runID, object)).String()
}

// StepKey is KeyDeriver{}.Step.
func StepKey(runID string, step int, tool string) string {
	return KeyDeriver{}.Step(runID, step, tool)
}

// EffectKey is KeyDeriver{}.Effect.
func EffectKey(runID, object string) string { return KeyDeriver{}.Effect(runID, object) }

// lengthPrefixed joins parts so that no two different lists give the same
// bytes: ("a:b", "c") and ("a", "b:c") must derive different keys.
func lengthPrefixed(parts ...string) []byte {
	var b []byte
	for _, p := range parts {
		b = strconv.AppendInt(b, int64(len(p)), 10)
		b = append(b, ':')
		b = append(b, p...)
	}
	return b
}
