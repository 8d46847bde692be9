package idemmcp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/idemkit/idem/backend"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// metaKeys are the members of params._meta that carry a call's key, in
// the order keyOf reads them. MCP names no key: clients in use send one of
// these.
var metaKeys = [...]string{MetaKey, MetaKeyDashed, MetaKeyNamespaced}

// metaTopLevelKey is where TopLevelKeys puts a top-level
// params.idempotencyKey that differs from the one in
// _meta.idempotencyKey: keyOf reads it second, so that such a call is
// refused for its two keys.
const metaTopLevelKey = "idemmcp/topLevelIdempotencyKey"

// keyOf finds a call's key: params._meta.idempotencyKey first (where the
// transport wrappers also put a SEP-3182 top-level key), then
// _meta["io.modelcontextprotocol/idempotency-key"], then
// _meta["io.modelcontextprotocol/idempotencyKey"], then the argument named
// arg. keyed is false when the call sends none; a key of the wrong JSON
// type comes back as "" with keyed true, and is refused as invalid. A call
// that sends two different keys gets an error naming where both came
// from; the same key under several names is one key.
func keyOf(p *mcp.CallToolParamsRaw, arg string) (key string, keyed bool, err error) {
	var from string
	take := func(name string, v any) bool {
		s, ok := v.(string)
		switch {
		case !ok:
			key, keyed = "", true
			return false // a malformed key: refused as invalid
		case !keyed:
			key, keyed, from = s, true, name
		case s != key:
			err = fmt.Errorf("the call sends two different idempotency keys, in %s and in %s", from, name)
			return false
		}
		return true
	}
	for _, name := range [...]string{MetaKey, metaTopLevelKey, MetaKeyDashed, MetaKeyNamespaced} {
		where := "_meta." + name
		if name == metaTopLevelKey {
			where = "params." + MetaKey
		}
		if v, ok := p.Meta[name]; ok && v != nil {
			if !take(where, v) {
				return key, keyed, err
			}
		}
	}
	if arg == "" || len(p.Arguments) == 0 {
		return key, keyed, nil
	}
	var args map[string]json.RawMessage
	if json.Unmarshal(p.Arguments, &args) != nil {
		return key, keyed, nil
	}
	raw, ok := args[arg]
	if !ok || bytes.Equal(raw, []byte("null")) {
		return key, keyed, nil
	}
	var v any
	if json.Unmarshal(raw, &v) == nil {
		take("argument "+strconv.Quote(arg), v)
	} else {
		key, keyed = "", true
	}
	return key, keyed, err
}

// fingerprint digests the tool name and the arguments in idem's canonical
// JSON, without the key argument: the same arguments sent with a key in
// _meta or in the argument are the same request.
func (g *Guard) fingerprint(tool string, args json.RawMessage) (string, error) {
	if len(bytes.TrimSpace(args)) == 0 || bytes.Equal(bytes.TrimSpace(args), []byte("null")) {
		args = json.RawMessage("{}")
	}
	// The raw arguments are checked first: duplicate members, depth, size.
	fp, err := g.fp.Sum("tools/call", tool, "application/json", args)
	if err != nil || g.o.KeyArgument == "" {
		return fp, err
	}
	var members map[string]json.RawMessage
	if json.Unmarshal(args, &members) != nil {
		return fp, nil
	}
	if _, ok := members[g.o.KeyArgument]; !ok {
		return fp, nil
	}
	delete(members, g.o.KeyArgument)
	stripped, err := json.Marshal(members)
	if err != nil {
		return "", err
	}
	return g.fp.Sum("tools/call", tool, "application/json", stripped)
}

// scope returns the scope of a call's record: the tool name joined with
// the server's scope, the caller's principal, or nothing when the server
// said callers share one. Names are quoted so that no tool and principal
// pair can spell another's scope.
func (g *Guard) scope(ctx context.Context, tool string, req *mcp.CallToolRequest) (string, error) {
	var s string
	switch principal := g.principal(req); {
	case g.o.Scope != nil:
		sc, err := g.o.Scope(ctx, req)
		if err != nil {
			return "", err
		}
		s = fmt.Sprintf("mcp:%q scope:%s", tool, quoteBounded(sc))
	case principal != "":
		s = fmt.Sprintf("mcp:%q principal:%s", tool, quoteBounded(principal))
	case g.o.SharedScope:
		s = fmt.Sprintf("mcp:%q", tool)
	default:
		return "", fmt.Errorf("%w: the server scopes keys by the caller's principal, and this call has none", ErrUnauthenticated)
	}
	if err := backend.ValidateScope(s); err != nil {
		return "", fmt.Errorf("tool name too long for a scope: %w", err)
	}
	return s, nil
}

func (g *Guard) principal(req *mcp.CallToolRequest) string {
	if req == nil || req.Extra == nil || req.Extra.TokenInfo == nil {
		return ""
	}
	return g.o.Principal(req.Extra.TokenInfo)
}

// quoteBounded quotes s, or names it by its SHA-256 when quoting it would
// not leave room in a scope for a tool name.
func quoteBounded(s string) string {
	if q := fmt.Sprintf("%q", s); len(q) <= 128 {
		return q
	}
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}
