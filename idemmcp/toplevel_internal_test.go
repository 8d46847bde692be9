package idemmcp

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestLiftParams_KeyConflict: a top-level key beside another key in _meta
// is refused for its two keys; beside the same key it is one key.
func TestLiftParams_KeyConflict(t *testing.T) {
	for raw, want := range map[string]string{
		`{"name":"t","idempotencyKey":"a","_meta":{"idempotencyKey":"b"}}`:      "two different idempotency keys, in _meta.idempotencyKey and in params.idempotencyKey",
		`{"name":"t","idempotencyKey":"a","_meta":{"idempotencyKey":"\u0061"}}`: "",
		`{"name":"t","idempotencyKey":"a"}`:                                     "",
	} {
		var p mcp.CallToolParamsRaw
		if err := json.Unmarshal(liftParams(json.RawMessage(raw)), &p); err != nil {
			t.Fatal(err)
		}
		key, keyed, err := keyOf(&p, "")
		switch {
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: %v, want %q", raw, err, want)
		case want == "" && (err != nil || !keyed || key != "a"):
			t.Errorf("%s: key %q keyed %t err %v, want a", raw, key, keyed, err)
		}
	}
}
