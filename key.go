package idem

import (
	"context"
	"fmt"
	"strconv"

	"github.com/google/uuid"
)

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

// DownstreamKey returns an idempotency key for a call that the effect
// running with ctx makes to another service, such as a payment API that
// deduplicates by an Idempotency-Key of its own. The key is a UUIDv5 of
// the claim's scope and key and of name, which tells the effect's
// downstream calls apart ("payments", "email"): the same in every attempt
// of the claim, the one that runs after recovery decided "not committed"
// included (it does not depend on the fencing token), and different for
// every name and every (scope, key). So when the effect runs again after
// its first attempt may have reached the downstream, the downstream
// answers the second call with the first one's result instead of acting
// twice, as long as it keeps its keys longer than recovery can take.
//
// The key is 36 printable ASCII characters. Two applications whose stores
// use the same scopes and keys against one downstream account derive the
// same keys: put something of your own into name to keep them apart.
// DownstreamKey returns an error wrapping ErrNoClaim when ctx is not the
// context of an effect run by Do or DoTx (or derived from it).
func DownstreamKey(ctx context.Context, name string) (string, error) {
	c, ok := ClaimFromContext(ctx)
	if !ok {
		return "", fmt.Errorf("%w: DownstreamKey(%q) outside an effect", ErrNoClaim, name)
	}
	return uuid.NewSHA1(uuid.MustParse(DefaultKeyNamespace), lengthPrefixed("downstream", c.Scope(), c.Key(), name)).String(), nil
}

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
