package idemmcp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/idemkit/idem/backend"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// keyOf finds a call's key: params._meta.idempotencyKey first (where the
// transport wrappers also put a SEP-3182 top-level key), then the argument
// named arg. keyed is false when the call sends none; a key of the wrong
// JSON type comes back as "" with keyed true, and is refused as invalid.
func keyOf(p *mcp.CallToolParamsRaw, arg string) (key string, keyed bool) {
	if v, ok := p.Meta[MetaKey]; ok && v != nil {
		s, _ := v.(string)
		return s, true
	}
	if arg == "" || len(p.Arguments) == 0 {
		return "", false
	}
	var args map[string]json.RawMessage
	if json.Unmarshal(p.Arguments, &args) != nil {
		return "", false
	}
	raw, ok := args[arg]
	if !ok || bytes.Equal(raw, []byte("null")) {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", true
	}
	return s, true
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
